//! A run: for each scenario, reset the stock, drive the load through Nginx, read `/stats`
//! and Redis's `INFO`; then the table, the ratios, the JSON and the chart.

use std::time::Duration;

use anyhow::Context;
use seckill::keys::{ProductId, ProductKeys};
use serde_json::json;

use crate::admin::Service;
use crate::args::BenchArgs;
use crate::args::Suite;
use crate::measure::run_one;
use crate::ratios::ratios;
use crate::redis_usage::Masters;
use crate::report::Report;
use crate::row::Row;
use crate::scenario::Scenario;
use crate::{chart, partial, suites, table};

/// Runs the suite, prints the table and the ratios, and writes the JSON and the chart.
pub async fn run(args: BenchArgs) -> anyhow::Result<Report> {
    if args.suite == Suite::Capacity {
        // It starts the parts it measures: no cluster of the caller's is read.
        // Boxed: its future nests deep enough to overflow the compiler's layout queries.
        let capacity = Box::pin(crate::capacity::run(&args)).await?;
        let report = Report {
            suite: args.suite,
            rows: capacity.rows,
            ratios: capacity.ratios,
            peak_rss: Vec::new(),
            conditions: Vec::new(),
            admission: None,
            capacity: Some(capacity.figures),
        };
        print(&args, &report);
        write(&args, &report)?;
        return Ok(report);
    }
    let product = ProductId::parse(&args.product).map_err(anyhow::Error::msg)?;
    let scenarios = suites::scenarios(&args);
    let http = client(&scenarios)?;
    let service = Service {
        args: &args,
        http: &http,
        parts: None,
    };
    let mut info = connect(&args).await;

    let found = service.layout_found().await;
    let mut rows = Vec::new();
    let mut extra = Vec::new();
    if args.suite == Suite::Partial {
        let partial = partial::run(&service, &mut info).await?;
        rows.extend(partial.rows);
        extra.extend(partial.ratios);
    }
    rows.extend(scenario_rows(&service, &mut info, &product, scenarios).await?);
    service.leave_as_found(found, &rows).await?;
    let peak_rss = peak_rss(&service).await;
    let conditions = if args.suite == Suite::Seed003 {
        crate::seed003::probe(&service).await?
    } else {
        Vec::new()
    };
    let admission = if args.suite == Suite::Admission {
        Some(crate::admission::run(&service, &mut info).await?)
    } else {
        None
    };
    let mut ratios = ratios(&args, &rows, &peak_rss);
    ratios.extend(extra);
    let report = Report {
        suite: args.suite,
        rows,
        ratios,
        peak_rss,
        conditions,
        admission,
        capacity: None,
    };
    print(&args, &report);
    write(&args, &report)?;
    Ok(report)
}

/// The run's HTTP client: as many idle connections kept as the busiest scenario has
/// connections, two minutes for an answer.
fn client(scenarios: &[Scenario]) -> anyhow::Result<reqwest::Client> {
    let concurrency = scenarios.iter().map(|s| s.concurrency).max().unwrap_or(1);
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(usize::try_from(concurrency).unwrap_or(usize::MAX))
        .timeout(Duration::from_secs(120))
        .build()?)
}

/// Redis's masters, to read their `INFO`; `None`, said why, when they cannot be reached.
async fn connect(args: &BenchArgs) -> Option<Masters> {
    match Masters::connect(&args.redis).await {
        Ok(masters) => Some(masters),
        Err(err) => {
            eprintln!("{}", not_measured(args, &format!("{err:#}")));
            None
        }
    }
}

/// A row per scenario, in order. Redis stops being read (`info` left `None`) when it is
/// not the one the instances write to.
async fn scenario_rows(
    service: &Service<'_>,
    info: &mut Option<Masters>,
    product: &ProductId,
    scenarios: Vec<Scenario>,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::with_capacity(scenarios.len());
    for scenario in scenarios {
        let row = run_one(service, info, scenario).await?;
        // The first reset tells whether INFO reads the Redis the instances write to.
        if let Some(masters) = info
            && row.scenario.variant.is_some()
            && !masters.holds(&ProductKeys::new(product).meta).await
        {
            eprintln!(
                "{}",
                not_measured(service.args, "the instances do not write there")
            );
            *info = None;
        }
        rows.push(row);
    }
    Ok(rows)
}

/// Each instance's peak RSS, when the suite reads memory (none when it cannot be read).
async fn peak_rss(service: &Service<'_>) -> Vec<(String, u64)> {
    if !service.args.suite.reads_memory() {
        return Vec::new();
    }
    service.peak_rss().await.unwrap_or_else(|err| {
        eprintln!("peak RSS not read: {err:#}");
        Vec::new()
    })
}

/// Prints the table, the ratios, and the seed003, admission and capacity suites' findings.
fn print(args: &BenchArgs, report: &Report) {
    println!("{}", table::render(&report.rows));
    for ratio in &report.ratios {
        println!("{ratio}");
    }
    if args.suite == Suite::Seed003 {
        println!(
            "{}",
            crate::seed003::render(args, &report.rows, &report.conditions)
        );
    }
    if let Some(figures) = &report.admission {
        println!("{}", crate::admission::render(figures));
    }
    if let Some(figures) = &report.capacity {
        println!("{}", crate::capacity::render(figures));
    }
}

/// Writes the JSON (`--json`) and the chart (`--chart`), when asked for.
fn write(args: &BenchArgs, report: &Report) -> anyhow::Result<()> {
    if let Some(path) = &args.json {
        let json = json!({ "settings": args.settings(), "report": report });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("results: {}", path.display());
    }
    if let Some(path) = &args.chart {
        std::fs::write(path, chart::svg(&report.rows))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("chart: {}", path.display());
    }
    Ok(())
}

/// Why the Redis columns stay empty.
fn not_measured(args: &BenchArgs, why: &str) -> String {
    format!(
        "Redis at {} is not read ({why}): cmds/unit and cpu us/unit stay empty; give the \
         instances' --redis-url (scripts/cluster.sh redis-flags prints the local cluster's)",
        args.redis.redis_url
    )
}
