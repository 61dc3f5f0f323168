//! `seckill bench`: the side-by-side comparison, and the performance targets.
//!
//! For each scenario — by default every variant in the progression's order, all under the
//! same load — it resets the stock, drives the load through Nginx, reads `/stats` and
//! Redis's `INFO`, and prints one table. `--lessons` adds the rows that show the failure
//! modes; `--suite` picks a performance suite instead, which also prints its ratio (every
//! ratio from rows of the same run); `--json` and `--chart` write the results and an SVG.

mod chart;
pub mod load;
mod redis_usage;
mod suites;
mod table;

pub use suites::{Ratio, Suite};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::{Value, json};

use crate::store::RedisMode;
use crate::variant::Variant;

/// Flags of `seckill bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Where the load goes: Nginx in front of the instances (or one instance).
    #[arg(
        long,
        env = "SECKILL_BENCH_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,

    /// Where resets go [default: --url]. Nginx serves /admin to loopback clients only.
    #[arg(long)]
    pub admin_url: Option<String>,

    /// Bearer token for /admin, when the instances were started with one.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// The Redis the instances share, read with INFO for commands and CPU per unit sold
    /// [default: the one scripts/cluster.sh starts]. In cluster mode, seed nodes
    /// (comma-separated): every master is read, and the rows show the CPU per unit of each.
    #[arg(
        long,
        env = "SECKILL_REDIS_URL",
        default_value = "redis://127.0.0.1:6390"
    )]
    pub redis_url: String,

    /// How that Redis is deployed, as the instances were told.
    #[arg(long, env = "SECKILL_REDIS_MODE", value_enum, default_value_t = RedisMode::Standalone)]
    pub redis_mode: RedisMode,

    /// The master's name, in sentinel mode (--redis-url then lists the sentinels).
    #[arg(long, env = "SECKILL_REDIS_SENTINEL_MASTER")]
    pub redis_sentinel_master: Option<String>,

    /// What to run: the progression (the default), or a performance suite.
    #[arg(long, value_enum, default_value_t = Suite::Progression)]
    pub suite: Suite,

    /// Instances' own URLs (comma-separated), for the memory suite to read each one's
    /// peak RSS from its /metrics.
    #[arg(long, value_delimiter = ',')]
    pub instance_urls: Vec<String>,

    /// Rounds of the ceiling suite (healthz, lua, lua with batch=off, each round); its ratio
    /// is the median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=20))]
    pub rounds: u64,

    /// The instances have Redlock servers (--redlock-urls): the handoff suite adds a
    /// redlock row.
    #[arg(long)]
    pub with_redlock: bool,

    /// Variants to compare, comma-separated [default: all, in the progression's order].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub variants: Vec<Variant>,

    /// Requests per variant.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub requests: u64,

    /// Requests in flight at once (one connection each).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    pub concurrency: u64,

    /// Units set by the reset before each variant.
    #[arg(long, default_value_t = 500)]
    pub stock: i64,

    /// Shards the stock is split into for the segmented variant.
    #[arg(long, default_value_t = 8)]
    pub shards: u32,

    #[arg(long, default_value = "101")]
    pub product: String,

    /// Business time inside the critical section (all but lua).
    #[arg(long, default_value_t = 2)]
    pub work_ms: u64,

    /// How long token, watchdog and segmented requests wait for a held lock.
    #[arg(long, default_value_t = 5_000)]
    pub wait_ms: u64,

    /// Also run the failure lessons: setnx's dead holder, token with work longer than its
    /// TTL, and the watchdog on the same terms. Needs instances started with --faults.
    #[arg(long)]
    pub lessons: bool,

    /// The lessons' work, longer than the TTL and the lease.
    #[arg(long, default_value_t = 300)]
    pub long_work_ms: u64,

    /// The token lesson's TTL. Start the instances with the same --lock-lease-ms, so the
    /// watchdog lesson runs on the same terms.
    #[arg(long, default_value_t = 200)]
    pub short_ttl_ms: u64,

    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Write an SVG chart of goodput and oversell per row here.
    #[arg(long)]
    pub chart: Option<PathBuf>,
}

/// One row of the comparison: what was asked for.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub label: String,
    /// The variant to POST to; `None` for a baseline.
    pub variant: Option<Variant>,
    /// The baseline's path, sent as GETs: `/healthz` (no Redis), `/readyz` (one `PING`).
    pub baseline: Option<&'static str>,
    /// Knobs, as a query string.
    pub knobs: String,
    pub stock: i64,
    pub shards: u32,
    pub requests: u64,
    pub concurrency: u64,
    /// A request sent alone before the load (a fault).
    pub first: Option<String>,
}

/// One row of the comparison: what came of it.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    #[serde(flatten)]
    pub scenario: Scenario,
    pub statuses: BTreeMap<u16, usize>,
    pub transport_errors: usize,
    pub sold: i64,
    pub remaining: i64,
    pub oversold: i64,
    pub lost_updates: i64,
    pub lock_overlaps: i64,
    pub lock_lost: i64,
    pub elapsed_s: f64,
    /// Answers per second, whatever they said.
    pub throughput: f64,
    /// Time from the first request to the last 200, when the stock ran out.
    pub sell_out_s: Option<f64>,
    /// Units that really left the stock, per second (orders beyond them are oversell).
    pub goodput: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The slowest answer.
    pub max_ms: f64,
    /// The real time spent in the work inside the lock, mean and p99, as the 200s
    /// reported it (`work_ms` is what was asked for).
    pub work_mean_ms: Option<f64>,
    pub work_p99_ms: Option<f64>,
    /// Redis commands per unit sold, as Redis's INFO counts them (calls inside scripts too).
    pub redis_commands_per_unit: Option<f64>,
    /// Redis CPU time (user + sys) per unit sold, in microseconds, over every master.
    pub redis_cpu_us_per_unit: Option<f64>,
    /// The same, master by master (`host:port`), when the store has more than one.
    pub redis_cpu_us_per_unit_by_master: Vec<(String, f64)>,
    /// `/stats` after the load, as the service returned it (null for healthz).
    pub stats: Value,
}

/// What a run produced: the rows, and the ratios its suite asks for.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub suite: Suite,
    pub rows: Vec<Row>,
    pub ratios: Vec<Ratio>,
    /// Peak resident memory per instance (memory suite), bytes, by instance URL.
    pub peak_rss: Vec<(String, u64)>,
}

impl Row {
    pub fn count(&self, status: u16) -> usize {
        self.statuses.get(&status).copied().unwrap_or(0)
    }

    pub fn server_errors(&self) -> usize {
        self.statuses
            .iter()
            .filter(|(status, _)| **status >= 500)
            .map(|(_, n)| n)
            .sum()
    }
}

/// The progression: every chosen variant under the same load, then the lessons if asked.
pub fn progression(args: &BenchArgs) -> Vec<Scenario> {
    let variants = if args.variants.is_empty() {
        Variant::PROGRESSION.to_vec()
    } else {
        args.variants.clone()
    };
    let mut rows: Vec<Scenario> = variants
        .into_iter()
        .map(|variant| {
            let mut knobs = Vec::new();
            if variant != Variant::Lua {
                knobs.push(format!("work_ms={}", args.work_ms));
            }
            if matches!(
                variant,
                Variant::Token
                    | Variant::Watchdog
                    | Variant::Segmented
                    | Variant::Shares
                    | Variant::Redlock
            ) {
                knobs.push(format!("wait_ms={}", args.wait_ms));
            }
            let shards = if variant == Variant::Segmented {
                args.shards
            } else {
                1
            };
            let label = if shards > 1 {
                format!("{variant} x{shards}")
            } else {
                variant.to_string()
            };
            Scenario {
                label,
                variant: Some(variant),
                baseline: None,
                knobs: knobs.join("&"),
                stock: args.stock,
                shards,
                requests: args.requests,
                concurrency: args.concurrency,
                first: None,
            }
        })
        .collect();
    if args.lessons {
        let (work, ttl) = (args.long_work_ms, args.short_ttl_ms);
        let lesson = |label: String, variant: Variant, knobs: String| Scenario {
            label,
            variant: Some(variant),
            baseline: None,
            knobs,
            stock: 10,
            shards: 1,
            requests: 40,
            concurrency: 10,
            first: None,
        };
        rows.push(Scenario {
            first: Some("fault=abandon".into()),
            ..lesson("setnx, holder died".into(), Variant::Setnx, String::new())
        });
        rows.push(lesson(
            format!("token, work {work} > ttl {ttl}"),
            Variant::Token,
            format!(
                "work_ms={work}&ttl_ms={ttl}&wait_ms={}",
                args.wait_ms.max(10 * work)
            ),
        ));
        rows.push(lesson(
            format!("watchdog, work {work} > lease"),
            Variant::Watchdog,
            format!("work_ms={work}&wait_ms={}", args.wait_ms.max(10 * work)),
        ));
    }
    rows
}

/// Runs the suite, prints the table and the ratios, and writes the JSON and the chart.
pub async fn run(args: BenchArgs) -> anyhow::Result<Report> {
    let scenarios = suites::scenarios(&args);
    let concurrency = scenarios.iter().map(|s| s.concurrency).max().unwrap_or(1);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::try_from(concurrency).unwrap_or(usize::MAX))
        .timeout(Duration::from_secs(120))
        .build()?;
    let mut info = redis_usage::Masters::connect(
        args.redis_mode,
        &args.redis_url,
        args.redis_sentinel_master.as_deref(),
    )
    .await?;

    let found = layout_found(&args, &http).await;
    let mut rows = Vec::with_capacity(scenarios.len());
    for scenario in scenarios {
        rows.push(run_one(&args, &http, &mut info, scenario).await?);
    }
    leave_as_found(&args, &http, found, &rows).await?;
    let peak_rss = if args.suite.reads_memory() {
        suites::peak_rss(&http, &args.instance_urls)
            .await
            .unwrap_or_else(|err| {
                eprintln!("peak RSS not read: {err:#}");
                Vec::new()
            })
    } else {
        Vec::new()
    };
    let ratios = suites::ratios(&args, &rows, &peak_rss);
    println!("{}", table::render(&rows));
    for ratio in &ratios {
        println!("{ratio}");
    }
    let report = Report {
        suite: args.suite,
        rows,
        ratios,
        peak_rss,
    };
    if let Some(path) = &args.json {
        let json = json!({ "settings": settings(&args), "report": report });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("results: {}", path.display());
    }
    if let Some(path) = &args.chart {
        std::fs::write(path, chart::svg(&report.rows))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("chart: {}", path.display());
    }
    Ok(report)
}

fn settings(args: &BenchArgs) -> Value {
    json!({
        "suite": args.suite,
        "url": args.url,
        "redis_mode": args.redis_mode,
        "requests": args.requests,
        "concurrency": args.concurrency,
        "stock": args.stock,
        "shards": args.shards,
        "work_ms": args.work_ms,
        "wait_ms": args.wait_ms,
        "lessons": args.lessons,
        "long_work_ms": args.long_work_ms,
        "short_ttl_ms": args.short_ttl_ms,
    })
}

async fn run_one(
    args: &BenchArgs,
    http: &reqwest::Client,
    info: &mut redis_usage::Masters,
    scenario: Scenario,
) -> anyhow::Result<Row> {
    let base = args.url.trim_end_matches('/');
    let Some(variant) = scenario.variant else {
        return run_baseline(http, base, scenario).await;
    };
    reset(args, http, &scenario).await?;
    let mut url = format!("{base}/deduct_stock/{variant}?product={}", args.product);
    if let Some(first) = &scenario.first {
        let response = http.post(format!("{url}&{first}")).send().await?;
        let status = response.status();
        if status == 400 {
            bail!(
                "{}: the instances refused {first}: {} (start them with --faults)",
                scenario.label,
                response.text().await.unwrap_or_default()
            );
        }
    }
    if !scenario.knobs.is_empty() {
        url = format!("{url}&{}", scenario.knobs);
    }

    let before = info.read().await?;
    let load = drive(http, load::Method::Post, &url, &scenario).await?;
    let after = info.read().await?;

    let stats: Value = http
        .get(format!("{base}/stats?product={}", args.product))
        .send()
        .await?
        .error_for_status()
        .context("GET /stats")?
        .json()
        .await?;
    let field = |name: &str| stats[name].as_i64().unwrap_or_default();
    let (initial, sold, remaining) = (field("initial"), field("sold"), field("remaining"));
    let real_units = sold.min(initial - remaining).max(0);
    let sell_out = (remaining <= 0 && sold > 0)
        .then_some(load.last_ok)
        .flatten();
    let window = sell_out.unwrap_or(load.elapsed).as_secs_f64().max(1e-9);
    let per_unit = |total: f64| (sold > 0).then(|| total / sold as f64);
    let spent = redis_usage::spent(&before, &after);
    let commands = spent.iter().map(|(_, commands, _)| *commands).sum::<u64>() as f64;
    let cpu_us: f64 = spent.iter().map(|(_, _, cpu)| cpu).sum();
    let by_master = if spent.len() > 1 {
        spent
            .iter()
            .filter_map(|(addr, _, cpu)| Some((addr.clone(), per_unit(*cpu)?)))
            .collect()
    } else {
        Vec::new()
    };

    let (throughput, p50_ms, p99_ms, max_ms) = (
        load.throughput(),
        load.percentile_ms(0.50),
        load.percentile_ms(0.99),
        load.percentile_ms(1.0),
    );
    let work = load.work_ms();
    Ok(Row {
        statuses: load.statuses,
        transport_errors: load.transport_errors,
        sold,
        remaining,
        oversold: field("oversold"),
        lost_updates: field("lost_updates"),
        lock_overlaps: field("lock_overlaps"),
        lock_lost: field("lock_lost"),
        elapsed_s: load.elapsed.as_secs_f64(),
        throughput,
        sell_out_s: sell_out.map(|d| d.as_secs_f64()),
        goodput: real_units as f64 / window,
        p50_ms,
        p99_ms,
        max_ms,
        work_mean_ms: work.map(|(mean, _)| mean),
        work_p99_ms: work.map(|(_, p99)| p99),
        redis_commands_per_unit: per_unit(commands),
        redis_cpu_us_per_unit: per_unit(cpu_us),
        redis_cpu_us_per_unit_by_master: by_master,
        stats,
        scenario,
    })
}

/// Drives the scenario's requests at `url` from its connections, behind a progress bar.
async fn drive(
    http: &reqwest::Client,
    method: load::Method,
    url: &str,
    scenario: &Scenario,
) -> anyhow::Result<load::LoadResult> {
    let progress = ProgressBar::new(scenario.requests).with_message(scenario.label.clone());
    progress.set_style(
        ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("a valid progress template")
            .progress_chars("=> "),
    );
    let requests = usize::try_from(scenario.requests)?;
    let concurrency = usize::try_from(scenario.concurrency)?;
    let never = Default::default();
    let load = load::drive(http, method, url, requests, concurrency, &progress, &never).await;
    progress.finish_and_clear();
    Ok(load)
}

/// A baseline under the same load: GETs of `/healthz` (what Nginx and the instances do
/// without Redis) or `/readyz` (one `PING` each).
async fn run_baseline(
    http: &reqwest::Client,
    base: &str,
    scenario: Scenario,
) -> anyhow::Result<Row> {
    let url = format!("{base}{}", scenario.baseline.unwrap_or("/healthz"));
    let load = drive(http, load::Method::Get, &url, &scenario).await?;
    Ok(Row {
        throughput: load.throughput(),
        elapsed_s: load.elapsed.as_secs_f64(),
        p50_ms: load.percentile_ms(0.50),
        p99_ms: load.percentile_ms(0.99),
        max_ms: load.percentile_ms(1.0),
        work_mean_ms: None,
        work_p99_ms: None,
        statuses: load.statuses,
        transport_errors: load.transport_errors,
        sold: 0,
        remaining: 0,
        oversold: 0,
        lost_updates: 0,
        lock_overlaps: 0,
        lock_lost: 0,
        sell_out_s: None,
        goodput: 0.0,
        redis_commands_per_unit: None,
        redis_cpu_us_per_unit: None,
        redis_cpu_us_per_unit_by_master: Vec::new(),
        stats: Value::Null,
        scenario,
    })
}

/// The product's stock and shard count before the bench, if it had been reset.
async fn layout_found(args: &BenchArgs, http: &reqwest::Client) -> Option<(i64, u32)> {
    let base = args.url.trim_end_matches('/');
    let response = http
        .get(format!("{base}/stats?product={}", args.product))
        .send()
        .await
        .ok()?;
    let stats: Value = response.error_for_status().ok()?.json().await.ok()?;
    Some((
        stats["initial"].as_i64()?,
        u32::try_from(stats["shards"].as_u64()?).ok()?,
    ))
}

/// Every row resets the product; at the end it is set back to the stock and shard count
/// the bench found (its orders cleared), so that what sold it before sells it again.
async fn leave_as_found(
    args: &BenchArgs,
    http: &reqwest::Client,
    found: Option<(i64, u32)>,
    rows: &[Row],
) -> anyhow::Result<()> {
    let last_shards = rows
        .iter()
        .rev()
        .find(|r| r.scenario.variant.is_some())
        .map(|r| r.scenario.shards);
    match (found, last_shards) {
        (_, None) => {}
        (Some((stock, shards)), Some(_)) => {
            reset_to(args, http, stock, shards).await?;
            eprintln!(
                "product {} reset to {stock} units in {shards} shard(s), as the bench found it",
                args.product
            );
        }
        (None, Some(shards)) => eprintln!(
            "product {} had no stock before the bench; it is left as the last row set it ({shards} shard(s){})",
            args.product,
            if shards > 1 {
                ": only segmented sells it; reset it with shards 1 for the others"
            } else {
                ""
            }
        ),
    }
    Ok(())
}

async fn reset(
    args: &BenchArgs,
    http: &reqwest::Client,
    scenario: &Scenario,
) -> anyhow::Result<()> {
    reset_to(args, http, scenario.stock, scenario.shards).await
}

async fn reset_to(
    args: &BenchArgs,
    http: &reqwest::Client,
    stock: i64,
    shards: u32,
) -> anyhow::Result<()> {
    let admin = args.admin_url.as_deref().unwrap_or(&args.url);
    let mut request = http
        .post(format!("{}/admin/reset", admin.trim_end_matches('/')))
        .json(&json!({
            "product": args.product,
            "stock": stock,
            "shards": shards,
        }));
    if let Some(token) = &args.admin_token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.context("POST /admin/reset")?;
    if !response.status().is_success() {
        bail!(
            "reset refused ({}): {}",
            response.status(),
            response.text().await.unwrap_or_default()
        );
    }
    Ok(())
}
