//! One scenario measured: reset the stock, drive the load through Nginx, read `/stats`,
//! Redis's `INFO` and the instances' lock counters — a row.

use std::time::{Duration, Instant};

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};
use seckill::variants::Variant;
use seckill_load::{Buyers, Control, Load, Method, Report as LoadReport};
use serde_json::{Value, json};

mod cost;

use self::cost::{Before, Cost};
use crate::admin::{Service, Terms};
use crate::args::{BenchArgs, Suite};
use crate::redis_usage::Masters;
use crate::row::{Drain, Row};
use crate::scenario::{Key, Scenario};

/// Measures one scenario and returns its row (for a baseline, what the clients saw alone).
pub(crate) async fn run_one(
    service: &Service<'_>,
    info: &mut Option<Masters>,
    scenario: Scenario,
) -> anyhow::Result<Row> {
    let args = service.args;
    let base = args.url.trim_end_matches('/');
    let Some(variant) = scenario.variant else {
        return run_baseline(service, base, scenario).await;
    };
    let others = reset_products(service, &scenario).await?;
    send_first(service, base, variant, &scenario).await?;
    let urls = deduct_urls(base, variant, &args.product, &others, &scenario);
    let before = Before::read(service, info, variant).await?;
    let load = drive(service.http, load_of(args, urls), &scenario).await;
    let ended = Instant::now();
    let cost = before.cost(service, info).await?;
    let mut stats = service.stats().await?;
    for product in &others {
        add_stats(&mut stats, &service.stats_of(product).await?);
    }
    let drain = match scenario.key {
        Key::Orders { on: true, .. } | Key::Capacity { db: true, .. } => {
            Some(drained(service, &stats, ended, &load).await?)
        }
        _ => None,
    };
    Ok(row(args.suite, scenario, load, stats, &cost, drain))
}

/// The deduction URL of `product` at `variant`, with `knobs` when there are any.
fn deduct_url(base: &str, variant: Variant, product: &str, knobs: &str) -> String {
    let url = format!("{base}/deduct_stock/{variant}?product={product}");
    if knobs.is_empty() {
        url
    } else {
        format!("{url}&{knobs}")
    }
}

/// Sends the scenario's request alone before the load (a fault), if it has one; an error
/// when the instances refuse it (started without `--faults`).
async fn send_first(
    service: &Service<'_>,
    base: &str,
    variant: Variant,
    scenario: &Scenario,
) -> anyhow::Result<()> {
    let Some(first) = &scenario.first else {
        return Ok(());
    };
    let url = deduct_url(base, variant, &service.args.product, "");
    let response = service.http.post(format!("{url}&{first}")).send().await?;
    if response.status() == 400 {
        bail!(
            "{}: the instances refused {first}: {} (start them with --faults)",
            scenario.label,
            response.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

/// The URLs of the load's requests: `--product`'s and the `others`' deductions with the
/// scenario's knobs, spread as [`at_random`] spreads them.
fn deduct_urls(
    base: &str,
    variant: Variant,
    product: &str,
    others: &[String],
    scenario: &Scenario,
) -> Vec<String> {
    let urls = std::iter::once(product)
        .chain(others.iter().map(String::as_str))
        .map(|product| deduct_url(base, variant, product, &scenario.knobs))
        .collect();
    at_random(urls, scenario.requests)
}

/// The load of a row: `urls` clicked by the bench's buyers (`--users`, `--clicks`), with
/// idempotency keys under `--keys`.
fn load_of(args: &BenchArgs, urls: Vec<String>) -> Load {
    let load = Load::to(urls, Method::Post).buyers(Buyers {
        users: args.users.map(|u| usize::try_from(u).unwrap_or(usize::MAX)),
        clicks: usize::try_from(args.clicks).unwrap_or(1),
    });
    if args.keys {
        load.keyed(key_prefix())
    } else {
        load
    }
}

/// The row of a scenario measured: the load's figures, the audit's (`stats`), and what
/// each unit sold cost the stores.
fn row(
    suite: Suite,
    scenario: Scenario,
    load: LoadReport,
    stats: Value,
    cost: &Cost,
    drain: Option<Drain>,
) -> Row {
    let field = |name: &str| stats[name].as_i64().unwrap_or_default();
    let (initial, sold, remaining) = (field("initial"), field("sold"), field("remaining"));
    let real_units = sold.min(initial - remaining).max(0);
    let sell_out = (remaining <= 0 && sold > 0)
        .then_some(load.last_ok)
        .flatten();
    let window = sell_out.unwrap_or(load.elapsed).as_secs_f64().max(1e-9);
    let spent = &cost.spent;
    let per_unit = |total: f64| (sold > 0 && !spent.is_empty()).then(|| total / sold as f64);
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
    let lock = cost.lock.filter(|lock| lock.tries > 0);
    let work = load.work_ms();
    Row {
        throughput: load.throughput(),
        p50_ms: load.percentile_ms(0.50),
        p99_ms: load.percentile_ms(0.99),
        max_ms: load.percentile_ms(1.0),
        elapsed_s: load.elapsed.as_secs_f64(),
        statuses: load.statuses,
        transport_errors: load.transport_errors,
        sold,
        remaining,
        oversold: field("oversold"),
        lost_updates: field("lost_updates"),
        lock_overlaps: field("lock_overlaps"),
        lock_lost: field("lock_lost"),
        sell_out_s: sell_out.map(|d| d.as_secs_f64()),
        goodput: real_units as f64 / window,
        work_mean_ms: work.map(|(mean, _)| mean),
        work_p99_ms: work.map(|(_, p99)| p99),
        redis_commands_per_unit: per_unit(commands),
        redis_cpu_us_per_unit: per_unit(cpu_us),
        lock_tries_per_unit: lock.filter(|_| sold > 0).map(|lock| {
            (
                lock.tries as f64 / sold as f64,
                lock.wakeups as f64 / sold as f64,
            )
        }),
        lock_tries_without_reason: lock.map(|lock| lock.without_reason),
        lock_most_tries: cost.most_tries.filter(|_| lock.is_some()),
        redis_cpu_us_per_unit_by_master: by_master,
        lock_store_cpu_us_per_unit: match cost.lock_cpu_us {
            Some(cpu) => (sold > 0).then(|| cpu / sold as f64),
            // The stores and seed003 suites' rows whose lock lives in the stock store.
            None if matches!(suite, Suite::Stores | Suite::Seed003) => per_unit(cpu_us),
            None => None,
        },
        parts_cpu: cost.parts,
        drain,
        stats,
        scenario,
    }
}

/// Resets `--product` for the scenario and the products besides it that its load is spread
/// over (`<product>-1`, …), which it returns. Each has the scenario's whole stock: whichever
/// products the requests pick, none runs out.
async fn reset_products(service: &Service<'_>, scenario: &Scenario) -> anyhow::Result<Vec<String>> {
    let args = service.args;
    let in_database = scenario.variant.is_some_and(|v| v.spec().stock_in_database);
    service
        .reset_in(
            scenario.stock,
            scenario.shards,
            scenario.orders,
            in_database,
        )
        .await?;
    let mut others = Vec::new();
    for n in 1..scenario.products.max(1) {
        let product = format!("{}-{n}", args.product);
        let terms = Terms {
            stock: scenario.stock,
            shards: scenario.shards,
            per_user: args.per_user,
            orders: true,
            in_database,
        };
        service.reset_with(&product, terms).await?;
        others.push(product);
    }
    Ok(others)
}

/// Several products' URLs: each request's product drawn at random (the same draw for every
/// variant at a step, so their rows compare), as buyers spread over a catalogue. Taken in
/// turn instead, the requests in flight at once would never share a product once there are
/// as many products as connections. One URL: as it is.
fn at_random(urls: Vec<String>, requests: u64) -> Vec<String> {
    if urls.len() < 2 {
        return urls;
    }
    // Request n goes to the n-th (modulo the length): a cycle long enough to look random.
    let cycle = usize::try_from(requests).unwrap_or(usize::MAX).min(20_000);
    let mut rng = fastrand::Rng::with_seed(urls.len() as u64);
    (0..cycle)
        .map(|_| urls[rng.usize(..urls.len())].clone())
        .collect()
}

/// Adds another product's audit to `total`: every count, at the top and in `optimistic`.
/// (The rest — the product, its shards, its locks — stays the first product's.)
fn add_stats(total: &mut Value, other: &Value) {
    fn add(total: &mut Value, other: &Value) {
        let (Some(total), Some(other)) = (total.as_object_mut(), other.as_object()) else {
            return;
        };
        for (field, value) in other {
            match (total.get_mut(field), value.as_i64()) {
                (Some(sum), Some(n)) if sum.is_i64() => *sum = json!(sum.as_i64().unwrap_or(0) + n),
                (None, Some(n)) => {
                    total.insert(field.clone(), json!(n));
                }
                _ => {}
            }
        }
    }
    add(total, other);
    if total["optimistic"].is_null() && other["optimistic"].is_object() {
        total["optimistic"] = json!({});
    }
    add(&mut total["optimistic"], &other["optimistic"]);
    let tx = &total["optimistic"];
    let (commits, conflicts) = (tx["commits"].as_i64(), tx["conflicts"].as_i64());
    if let (Some(commits), Some(conflicts)) = (commits, conflicts)
        && commits + conflicts > 0
    {
        total["optimistic"]["conflict_rate"] =
            json!(conflicts as f64 / (commits + conflicts) as f64);
    }
}

/// Waits (up to a minute) until the orders of a row whose sale was streamed are all in
/// the database and the two stores agree: how big the backlog was when the load ended,
/// and how long it took to drain.
async fn drained(
    service: &Service<'_>,
    stats: &Value,
    ended: Instant,
    load: &LoadReport,
) -> anyhow::Result<Drain> {
    let record = &stats["orders_of_record"];
    if record["streamed"] != true {
        bail!(
            "the orders suite needs instances with --orders-db (POSTGRES=1 scripts/cluster.sh start): {}",
            if record.is_null() {
                "no orders_of_record in /stats".into()
            } else {
                record.to_string()
            }
        );
    }
    let backlog_at_end = record["backlog"].as_i64().unwrap_or_default();
    let sold = stats["sold"].as_i64().unwrap_or_default();
    let mut last = record.clone();
    while ended.elapsed() < Duration::from_secs(60) {
        if last["backlog"] == 0 && last["drift"] == 0 && last["in_database"] == sold {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        last = service.stats().await?["orders_of_record"].clone();
    }
    let drained_after = ended.elapsed();
    let drift = last["drift"].as_i64();
    if drift != Some(0) {
        bail!("the orders did not drain within a minute of the load: {last}");
    }
    let total = load.elapsed + drained_after;
    Ok(Drain {
        backlog_at_end,
        drained_after_s: drained_after.as_secs_f64(),
        orders_per_s: sold as f64 / total.as_secs_f64().max(1e-9),
    })
}

/// The idempotency keys of one row: `bench-<pid>-<ms>-<n>`, new for every row.
fn key_prefix() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    format!("bench-{}-{now}", std::process::id())
}

/// Drives the scenario's requests from its connections, behind a progress bar.
async fn drive(http: &reqwest::Client, load: Load, scenario: &Scenario) -> LoadReport {
    let progress = ProgressBar::new(scenario.requests).with_message(scenario.label.clone());
    progress.set_style(
        ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("a valid progress template")
            .progress_chars("=> "),
    );
    let control = Control::default();
    let ticker = {
        let (progress, control) = (progress.clone(), control.clone());
        tokio::spawn(async move {
            loop {
                progress.set_position(control.answered());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let requests = usize::try_from(scenario.requests).unwrap_or(usize::MAX);
    let concurrency = usize::try_from(scenario.concurrency).unwrap_or(usize::MAX);
    let report = load
        .requests(requests)
        .concurrency(concurrency)
        .run(http, &control)
        .await;
    ticker.abort();
    progress.finish_and_clear();
    report
}

/// A baseline under the same load: GETs of `/healthz` (what Nginx and the instances do
/// without Redis) or `/readyz` (one `PING` each).
async fn run_baseline(
    service: &Service<'_>,
    base: &str,
    scenario: Scenario,
) -> anyhow::Result<Row> {
    let url = format!("{base}{}", scenario.baseline.unwrap_or("/healthz"));
    let load = Load::to(vec![url], Method::Get);
    let load = drive(service.http, load, &scenario).await;
    Ok(Row::from_load(scenario, load))
}
