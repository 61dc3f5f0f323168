//! The `zookeeper` variant on a real 3-server ensemble: an exact sell-out through Nginx from
//! two instances, the leader killed under load, one server of three down, and a holder
//! paused (SIGSTOP) past its session timeout.

use std::time::{Duration, Instant};

use seckill_testkit::{
    Api, Control, Instance, Nginx, RedisServer, ZooKeeperEnsemble, assert_every_200_an_order,
    assert_exact, assert_sold_out, heavy_turn, int,
};

use crate::instance;

/// A 3-server ensemble, a stock store, and two instances on both with a session timeout of
/// `session` ms and `extra` flags.
fn started(session: &str, extra: &[&str]) -> (ZooKeeperEnsemble, RedisServer, Vec<Instance>) {
    let zk = ZooKeeperEnsemble::start(3);
    let redis = RedisServer::start();
    let instances = instances(&redis, &zk, session, extra);
    (zk, redis, instances)
}

/// Two instances on one stock store and the ensemble, with a session timeout of `session`.
fn instances(
    redis: &RedisServer,
    zk: &ZooKeeperEnsemble,
    session: &str,
    extra: &[&str],
) -> Vec<Instance> {
    let hosts = zk.hosts();
    let mut args = vec![
        "--zookeeper-urls",
        &hosts,
        "--zookeeper-session-ms",
        session,
    ];
    args.extend_from_slice(extra);
    (0..2).map(|_| instance(&redis.url(), &args)).collect()
}

/// 100 connections through Nginx from two instances, twice as many requests as units: every
/// unit sold once, the lock never held by two, the ensemble's queue left empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_sells_out_exactly_through_nginx_from_two_instances() {
    let _turn = heavy_turn().await;
    let (zk, _redis, instances) = started("4000", &[]);
    let nginx = Nginx::start(&instances);
    let api = Api::new(&nginx.url(""));
    api.reset("101", 400, 1).await;

    let report = api
        .run(
            api.load("101", "zookeeper?work_ms=1&wait_ms=5000")
                .requests(800)
                .concurrency(100),
        )
        .await;
    let stats = api.stats("101").await;
    eprintln!("{report:?}; {stats}");
    assert_eq!(report.transport_errors, 0, "{report:?}");
    assert_eq!(report.count(200), 400, "every unit sold once: {report:?}");
    assert_eq!(
        report.count(200) + report.count(409),
        800,
        "the rest sold out: {report:?}"
    );
    assert_sold_out(&stats, 400, "zookeeper");
    let by_instance = stats["by_instance"].as_object().expect("by_instance");
    assert_eq!(by_instance.len(), 2, "both instances sold: {stats}");
    // Every contender's node deleted: given the lock back, or gave up waiting.
    let leader = tokio::task::block_in_place(|| zk.wait_for_leader(Duration::from_secs(10)));
    let deadline = Instant::now() + Duration::from_secs(10);
    while zk.ephemerals(leader) != Some(0) {
        assert!(
            Instant::now() < deadline,
            "nodes left: {:?}",
            zk.ephemerals(leader)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The leader killed under load: while the other two elect, requests are answered 503
/// (`lock_store_unavailable`) or 429, never 500 and never held past a few seconds; no two
/// holders overlap; sales resume by themselves; and with that server still down (one of
/// three) the ensemble goes on granting locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_leader_killed_under_load_elects_and_sales_resume() {
    let _turn = heavy_turn().await;
    let (zk, _redis, instances) = started("4000", &[]);
    let nginx = Nginx::start(&instances);
    let api = Api::new(&nginx.url(""));
    let initial = 100_000;
    api.reset("101", initial, 1).await;

    let control = Control::default();
    let load = api
        .load("101", "zookeeper?wait_ms=1000")
        .requests(60_000)
        .concurrency(50);
    let running = api.spawn(load, &control);
    let within = Duration::from_secs(30);
    api.wait_sold("101", 200, within, "sales before the kill")
        .await;
    let leader = tokio::task::block_in_place(|| zk.wait_for_leader(within));
    zk.kill(leader);
    let killed_at = Instant::now();
    let elected = tokio::task::block_in_place(|| zk.wait_for_leader(within));
    let election = killed_at.elapsed();
    let then = api
        .wait_sold("101", 0, within, "/stats after the kill")
        .await;
    api.wait_sold(
        "101",
        then + 300,
        within,
        "sales with one server of three down",
    )
    .await;
    let resumed_after = killed_at.elapsed();
    control.stop();
    let report = running.await.unwrap();

    let stats = api.stats("101").await;
    eprintln!(
        "killed leader {leader}, server {elected} leads after {election:?}; sales resumed after {resumed_after:?}; {report:?}; {stats}"
    );
    assert_ne!(elected, leader);
    assert_eq!(report.transport_errors, 0, "{report:?}");
    assert!(
        report.statuses.keys().all(|s| [200, 429, 503].contains(s)),
        "only sales, 429 lock_busy and clean 503s: {report:?}"
    );
    assert_eq!(report.without_retry_after, 0, "{report:?}");
    assert!(
        report.slowest() < Duration::from_secs(6),
        "a request hung: {report:?}"
    );
    assert_exact(&stats, initial, "zookeeper, its leader killed");
    assert_every_200_an_order(&report, &stats, "zookeeper, its leader killed");
}

/// Instance A takes the lock and stops itself (`fault=stop_before_commit`: SIGSTOP to its
/// whole process) right after its last check that it holds the lock, for longer than its
/// session; the ensemble deletes its node and instance B sells the one unit; A wakes and
/// commits. Without fencing it sells the unit again; with `fence=on` the stock refuses its
/// older zxid and it sells nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_paused_holder_sells_nothing_when_it_wakes_only_with_fencing() {
    let _turn = heavy_turn().await;
    let limits = [
        "--faults",
        "--max-work-ms",
        "5000",
        "--max-wait-ms",
        "8000",
        "--max-pause-ms",
        "9000",
    ];
    let (_zk, redis, instances) = started("2000", &limits);
    let (a, b) = (instances[0].api(), instances[1].api());

    // A stops for 9 s under a 2 s session, and B waits up to 8 s: the ensemble has 6 s past
    // the session's end to expire it and B to hear of it before A wakes (twice, in the
    // parallel suite, a 5 s stop with a 5 s wait left B to get the lock only after A's
    // commit: sold out, while the same test alone passed every time).
    for fence in ["off", "on"] {
        a.reset("102", 1, 1).await;
        let knobs =
            format!("zookeeper?work_ms=500&fault=stop_before_commit&pause_ms=9000&fence={fence}");
        let first = tokio::spawn({
            let a = a.clone();
            async move { a.deduct("102", &knobs).await }
        });
        wait_inside(&redis, "102").await;
        let second = b
            .deduct("102", &format!("zookeeper?wait_ms=8000&fence={fence}"))
            .await;
        let (status, first) = first.await.unwrap();
        let stats = a.stats("102").await;
        eprintln!("fence={fence}: holder A {status} {first}; holder B {second:?}; {stats}");
        assert_eq!(
            second.0, 200,
            "B got the lock once A's session expired: {second:?}"
        );
        assert_eq!(
            int(&stats, "lock_overlaps"),
            1,
            "A was still inside: {stats}"
        );
        if fence == "off" {
            assert_eq!(first["outcome"], "deducted", "{first}");
            assert_eq!(
                int(&stats, "oversold"),
                1,
                "consensus does not stop a paused holder: {stats}"
            );
        } else {
            assert_eq!(first["outcome"], "fenced", "{first}");
            assert_eq!(int(&stats, "oversold"), 0, "{stats}");
            assert_eq!(int(&stats, "sold"), 1, "{stats}");
            assert_eq!(int(&stats, "fenced"), 1, "{stats}");
        }
    }
}

/// Until a holder is inside `product`'s critical section (the audit's inside set has it).
async fn wait_inside(redis: &RedisServer, product: &str) {
    let inside = crate::keys(product).whole().inside.clone();
    let mut conn = redis.conn().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: u64 = redis::AsyncCommands::zcard(&mut conn, &inside)
            .await
            .unwrap();
        if n > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "nobody got inside {product}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `seckill-bench --suite stores` against the ensemble: watchdog and zookeeper rows at 200
/// waiters, with no work and with 2 ms, each selling exactly what it answered 200, the
/// ensemble's CPU per unit read from its JVMs, and the ratio of the two locks' units/s.
/// (How fast each is, the bench measures; nothing here holds a figure.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_stores_suite_reports_the_ensembles_cpu_per_unit() {
    let _turn = heavy_turn().await;
    let (zk, redis, instances) = started("4000", &[]);
    let nginx = Nginx::start(&instances);
    let pids = (0..zk.servers)
        .map(|i| zk.pid(i).to_string())
        .collect::<Vec<_>>()
        .join(",");
    let (url, redis_url) = (nginx.url(""), redis.url());
    let args = [
        "seckill-bench",
        "--suite",
        "stores",
        "--requests",
        "200",
        "--url",
        &url,
        "--redis-url",
        &redis_url,
        "--zookeeper-pids",
        &pids,
    ];
    let args = <seckill_bench::args::Cli as clap::Parser>::parse_from(args).args;
    let report = seckill_bench::run(args).await.expect("the suite ran");
    let names: Vec<&str> = report
        .rows
        .iter()
        .map(|r| r.scenario.label.as_str())
        .collect();
    assert_eq!(
        names.len(),
        4,
        "watchdog and zookeeper, work 0 and 2: {names:?}"
    );
    for row in &report.rows {
        let label = &row.scenario.label;
        assert_eq!(row.oversold, 0, "{label}");
        assert_eq!(row.lock_overlaps, 0, "{label}");
        assert_eq!(row.count(200) as i64, int(&row.stats, "sold"), "{label}");
        let cpu = row.lock_store_cpu_us_per_unit;
        assert!(
            cpu.is_some_and(|c| c > 0.0),
            "{label}: lock store cpu {cpu:?}"
        );
    }
    for work in [0, 2] {
        let name = format!("zookeeper / watchdog units/s, work {work}");
        let ratio = report.ratios.iter().find(|r| r.name == name);
        assert!(
            ratio.is_some_and(|r| r.value > 0.0),
            "{name}: {:?}",
            report.ratios
        );
    }
}
