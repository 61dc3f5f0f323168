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
use crate::{chart, partial, suites, table};

/// Runs the suite, prints the table and the ratios, and writes the JSON and the chart.
pub async fn run(args: BenchArgs) -> anyhow::Result<Report> {
    let product = ProductId::parse(&args.product).map_err(anyhow::Error::msg)?;
    let scenarios = suites::scenarios(&args);
    let concurrency = scenarios.iter().map(|s| s.concurrency).max().unwrap_or(1);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::try_from(concurrency).unwrap_or(usize::MAX))
        .timeout(Duration::from_secs(120))
        .build()?;
    let service = Service {
        args: &args,
        http: &http,
    };
    let mut info = match Masters::connect(&args.redis).await {
        Ok(masters) => Some(masters),
        Err(err) => {
            eprintln!("{}", not_measured(&args, &format!("{err:#}")));
            None
        }
    };

    let found = service.layout_found().await;
    let mut rows = Vec::with_capacity(scenarios.len());
    let mut extra = Vec::new();
    if args.suite == Suite::Partial {
        let partial = partial::run(&service, &mut info).await?;
        rows.extend(partial.rows);
        extra.extend(partial.ratios);
    }
    for scenario in scenarios {
        let row = run_one(&service, &mut info, scenario).await?;
        // The first reset tells whether INFO reads the Redis the instances write to.
        if let Some(masters) = &mut info
            && row.scenario.variant.is_some()
            && !masters.holds(&ProductKeys::new(&product).meta).await
        {
            eprintln!(
                "{}",
                not_measured(&args, "the instances do not write there")
            );
            info = None;
        }
        rows.push(row);
    }
    service.leave_as_found(found, &rows).await?;
    let peak_rss = if args.suite.reads_memory() {
        service.peak_rss().await.unwrap_or_else(|err| {
            eprintln!("peak RSS not read: {err:#}");
            Vec::new()
        })
    } else {
        Vec::new()
    };
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
    println!("{}", table::render(&rows));
    for ratio in &ratios {
        println!("{ratio}");
    }
    if args.suite == Suite::Seed003 {
        println!("{}", crate::seed003::render(&args, &rows, &conditions));
    }
    if let Some(figures) = &admission {
        println!("{}", crate::admission::render(figures));
    }
    let report = Report {
        suite: args.suite,
        rows,
        ratios,
        peak_rss,
        conditions,
        admission,
    };
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
    Ok(report)
}

/// Why the Redis columns stay empty.
fn not_measured(args: &BenchArgs, why: &str) -> String {
    format!(
        "Redis at {} is not read ({why}): cmds/unit and cpu us/unit stay empty; give the \
         instances' --redis-url (scripts/cluster.sh redis-flags prints the local cluster's)",
        args.redis.redis_url
    )
}
