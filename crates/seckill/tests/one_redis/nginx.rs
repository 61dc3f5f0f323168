//! The cluster as users run it: real Redis, two instances and real Nginx with the
//! project's config. The progression holds through Nginx, Nginx moves POSTs past a dead
//! instance, and the bench agrees with /stats.

use std::collections::BTreeSet;
use std::time::Duration;

use clap::Parser;
use seckill_bench::args::Cli;
use seckill_load::Control;
use seckill_testkit::{
    Api, Nginx, assert_adds_up, assert_orders_recorded, assert_sold_out, heavy_turn, int,
};

use crate::{recorded_orders, service};

/// Through Nginx: naive loses stock; every other variant of the progression sells exactly
/// the stock, and both instances take part.
#[tokio::test]
async fn progression_through_nginx() {
    let cluster = service(2, &[]);
    let nginx = Nginx::start(&cluster.instances);
    let api = Api::new(&nginx.url(""));

    api.reset("101", 100, 1).await;
    api.run(api.load("101", "naive").requests(400).concurrency(40))
        .await;
    let stats = api.stats("101").await;
    assert!(
        int(&stats, "lost_updates") > 0 || int(&stats, "oversold") > 0,
        "naive through Nginx: {stats}"
    );

    for (_, variant, shards) in crate::variants::progression_but_naive(&[("work_ms", "1")], 4) {
        api.reset("101", 60, shards).await;
        let stats = api.sell_out_in_rounds("101", &variant).await;
        assert_sold_out(&stats, 60, &variant);
        assert_eq!(
            stats["by_instance"].as_object().unwrap().len(),
            2,
            "{variant}: {stats}"
        );
    }
}

/// A POST deduction moves past a dead instance without an error (Nginx retries only what
/// never reached an instance), and nothing is sold twice.
#[tokio::test]
async fn post_moves_past_a_dead_instance() {
    let mut cluster = service(2, &[]);
    let nginx = Nginx::start(&cluster.instances);
    let api = Api::new(&nginx.url(""));
    api.reset("101", 100, 1).await;
    cluster.instances[1].kill();
    let statuses = api
        .run(api.load("101", "lua").requests(60).concurrency(3))
        .await
        .statuses;
    assert_eq!(
        statuses.get(&200),
        Some(&60),
        "every POST answered by the live instance: {statuses:?}"
    );
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "sold"), 60, "{stats}");
    assert_eq!(int(&stats, "remaining"), 40, "{stats}");
}

/// An instance SIGKILLed under load through Nginx, for lua and watchdog, with and without
/// idempotency keys. Every 200's order is in Redis and sold + remaining = initial either
/// way. With keys Nginx passes the requests the dead instance had in flight to the other,
/// which answers what was sold or sells it: no 502, every sale acknowledged, no key sold
/// twice. Without keys those requests are 502s, and some of them had sold (printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_clients_lose_nothing_when_an_instance_is_killed_under_load() {
    let _turn = heavy_turn().await;
    const INITIAL: i64 = 100_000;
    // Two variants, not every one: a lock-free sale and one under a lock whose holder dies
    // with the instance; each run starts a cluster and kills an instance under load.
    for variant in ["lua", "watchdog?work_ms=1"] {
        for keyed in [false, true] {
            // A lease the dead instance's lock is free after well within the others'
            // 5 s wait, and long enough that a busy machine's late renewal rarely loses it.
            let mut cluster = service(2, &["--lock-lease-ms", "2000"]);
            let nginx = Nginx::start(&cluster.instances);
            let api = Api::new(&nginx.url(""));
            api.reset("101", INITIAL, 1).await;
            let mut load = api
                .load("101", variant)
                .requests(2_000)
                .concurrency(50)
                .keeping_orders();
            if keyed {
                load = load.keyed("kill");
            }
            let control = Control::default();
            let running = api.spawn(load, &control);
            for _ in 0..3_000 {
                if control.answered() >= 400 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            cluster.instances[1].kill();
            let report = running.await.expect("the load");
            let stats = api.stats("101").await;
            let recorded = recorded_orders(&cluster.redis, "101").await;
            let acknowledged: BTreeSet<&String> = report.orders.iter().collect();
            let sold = int(&stats, "sold");
            let what = format!("{variant} keyed={keyed}");
            println!(
                "{what}: {:?}, sold {sold}, acknowledged {}, sold without a 200: {}, \
                 replayed {}",
                report.statuses,
                acknowledged.len(),
                sold - acknowledged.len() as i64,
                report.replayed
            );
            assert_orders_recorded(&report, &recorded, &what);
            // Overlaps are beside the point: the instance may be killed inside its section.
            assert_adds_up(&stats, INITIAL, &what);
            if !keyed {
                continue;
            }
            assert_eq!(report.count(502), 0, "{what}: {:?}", report.statuses);
            assert_eq!(report.transport_errors, 0, "{what}: {report:?}");
            // A 503 only as a holder that found its lock lost before committing (a
            // renewal late on a busy machine): a clean no, nothing sold, and counted.
            let lost = int(&stats, "lock_lost");
            assert!(
                report.count(503) as i64 <= lost,
                "{what}: a 503 that was not a lock lost: {:?}, lock_lost {lost}",
                report.statuses
            );
            assert_eq!(
                report.count(200) + report.count(503),
                2_000,
                "{what}: {:?}",
                report.statuses
            );
            // Each request had a key of its own: as many sales as keys means none twice.
            let idempotency = &stats["idempotency"];
            assert_eq!(idempotency["keyed_sales"], sold, "{what}: {stats}");
            assert_eq!(idempotency["keys_sold_twice"], 0, "{what}: {stats}");
            assert_eq!(
                acknowledged.len() as i64,
                sold,
                "{what}: every sale acknowledged"
            );
        }
    }
}

/// The bench's flags, as a user types them after `seckill-bench`.
pub(crate) fn bench_args(args: &[&str]) -> seckill_bench::BenchArgs {
    Cli::parse_from(std::iter::once("seckill-bench").chain(args.iter().copied())).args
}

/// `seckill-bench` through Nginx: its rows agree with the clients' counts and with /stats,
/// its table and chart show every row, and it leaves the product as it found it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_agrees_with_stats() {
    let _turn = heavy_turn().await;
    let cluster = service(2, &[]);
    let nginx = Nginx::start(&cluster.instances);
    let api = Api::new(&nginx.url(""));
    // The bench leaves the product as it found it (here: 7 units, unsplit).
    api.reset("101", 7, 1).await;
    let chart_path = std::env::temp_dir().join(format!("seckill-bench-{}.svg", std::process::id()));
    let (url, redis_url) = (nginx.url(""), cluster.redis.url());
    let args = bench_args(&[
        "--variants",
        "naive,token,segmented,lua",
        "--requests",
        "300",
        "--concurrency",
        "20",
        "--stock",
        "100",
        "--shards",
        "4",
        "--url",
        &url,
        "--redis-url",
        &redis_url,
        "--chart",
        chart_path.to_str().unwrap(),
    ]);
    let report = seckill_bench::run(args).await.expect("the bench ran");
    let table = seckill_bench::table::render(&report.rows);
    assert_eq!(report.rows.len(), 4);
    for row in &report.rows {
        let label = &row.scenario.label;
        assert!(
            table.contains(label.as_str()),
            "the table has {label}:\n{table}"
        );
        let answered: usize = row.statuses.values().sum();
        assert_eq!(answered, 300, "{label}: every request answered");
        let stats = &row.stats;
        for (field, figure) in [
            ("sold", row.sold),
            ("oversold", row.oversold),
            ("lost_updates", row.lost_updates),
            ("lock_overlaps", row.lock_overlaps),
            ("remaining", row.remaining),
        ] {
            assert_eq!(
                figure,
                int(stats, field),
                "{label}: {field} is /stats' figure"
            );
        }
        assert_eq!(
            row.count(200) as i64,
            row.sold,
            "{label}: one order per 200"
        );
        let commands = row.redis_commands_per_unit.expect("Redis was read");
        assert!(
            commands >= 1.0,
            "{label}: Redis did work per unit: {commands}"
        );
    }
    assert!(report.rows[0].lost_updates > 0, "naive lost updates");
    for row in &report.rows[1..] {
        assert_eq!(row.sold, 100, "{}", row.scenario.label);
        assert_eq!(row.oversold, 0, "{}", row.scenario.label);
    }
    // The product is left as the bench found it: 7 units, unsplit, no orders.
    let after = api.stats("101").await;
    assert_eq!(
        (
            int(&after, "initial"),
            int(&after, "shards"),
            int(&after, "sold")
        ),
        (7, 1, 0),
        "left as found: {after}"
    );
    let chart = std::fs::read_to_string(&chart_path).unwrap();
    assert!(
        chart.starts_with("<svg") && chart.contains("segmented x4"),
        "a chart with every row"
    );
    let _ = std::fs::remove_file(chart_path);
}

/// The performance suites report their ratios, each from rows of one run: here the ceiling
/// (healthz against lua), the shards curve, waiting and the contention curve (its rows'
/// audits summed over up to 1,024 products), on small numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_suites_report_ratios() {
    let _turn = heavy_turn().await;
    let cluster = service(2, &[]);
    let nginx = Nginx::start(&cluster.instances);
    let (url, redis_url) = (nginx.url(""), cluster.redis.url());
    for (suite, expected) in [
        ("ceiling", "lock-free ceiling"),
        ("shards", "segmented goodput"),
        ("waiting", "watchdog waiting"),
        (
            "contention",
            "contention over 1 product(s): optimistic / watchdog goodput",
        ),
    ] {
        let args = bench_args(&[
            "--suite",
            suite,
            "--rounds",
            "1",
            "--requests",
            "200",
            "--concurrency",
            "20",
            "--url",
            &url,
            "--redis-url",
            &redis_url,
        ]);
        let report = seckill_bench::run(args).await.expect("the suite ran");
        let ratio = report
            .ratios
            .iter()
            .find(|r| r.name == expected)
            .unwrap_or_else(|| panic!("{suite} reports {expected}: {:?}", report.ratios));
        assert!(ratio.value > 0.0, "{ratio}");
        for row in report.rows.iter().filter(|r| r.scenario.variant.is_some()) {
            assert_eq!(row.oversold, 0, "{suite}: {}", row.scenario.label);
            assert_eq!(
                row.count(200) as i64,
                int(&row.stats, "sold"),
                "{suite}: {}",
                row.scenario.label
            );
        }
    }
}
