//! Orders of record: every sale streamed from Redis into a real PostgreSQL, exactly once,
//! and reconciled in `/stats`.

use std::time::{Duration, Instant};

use seckill_testkit::{Api, Nginx, Postgres, Service, int};
use serde_json::{Value, json};

use crate::SECKILL;
use crate::nginx::bench_args;

/// Two instances with `--orders-db`, and Nginx.
fn with_database(db: &Postgres) -> (Service, Nginx, Api) {
    with_database_and(db, &[])
}

/// The same, the instances with `more` flags.
fn with_database_and(db: &Postgres, more: &[&str]) -> (Service, Nginx, Api) {
    let url = db.url();
    let mut args = vec!["--orders-db", &url, "--orders-claim-ms", "1000"];
    args.extend_from_slice(more);
    let cluster = Service::start(SECKILL, 2, &args);
    let nginx = Nginx::start(&cluster.instances);
    let api = Api::new(&nginx.url(""));
    (cluster, nginx, api)
}

/// `name` as the first instance's `/metrics` says once it satisfies `wanted` (within 5 s,
/// or the test fails).
async fn metric_within(cluster: &Service, name: &str, wanted: impl Fn(f64) -> bool) -> f64 {
    let api = cluster.api(0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let value = api.metric(name).await;
        if wanted(value) {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} stayed {value}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `/stats` once the backlog has drained and the two stores agree (or after `within`).
async fn drained(api: &Api, product: &str, within: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let stats = api.stats(product).await;
        let record = &stats["orders_of_record"];
        if record["backlog"] == 0 && record["drift"] == 0 {
            return stats;
        }
        if tokio::time::Instant::now() >= deadline {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Under lua and watchdog load through Nginx, every order answered 200 is in PostgreSQL
/// once, and the stores agree once the backlog has drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_order_answered_200_reaches_postgres_once() {
    let _turn = seckill_testkit::heavy_turn().await;
    let db = Postgres::start();
    let (_cluster, _nginx, api) = with_database(&db);
    for (variant, requests, shards) in [
        ("lua", 1_500, 1),
        ("watchdog?work_ms=1", 400, 1),
        ("segmented?work_ms=1", 400, 4),
    ] {
        api.reset("101", 5_000, shards).await;
        let load = api
            .load("101", variant)
            .requests(requests)
            .concurrency(50)
            .keeping_orders();
        let report = api.run(load).await;
        assert_eq!(report.count(200), requests, "{variant}: {report:?}");
        let stats = drained(&api, "101", Duration::from_secs(30)).await;
        let record = &stats["orders_of_record"];
        assert_eq!(record["streamed"], true, "{variant}: {stats}");
        assert_eq!(record["drift"], 0, "{variant}: {stats}");
        assert_eq!(
            record["in_database"],
            int(&stats, "sold"),
            "{variant}: {stats}"
        );
        let epoch = int(&stats, "epoch");
        let ids: Vec<String> = report.orders.iter().map(|o| format!("'{o}'")).collect();
        let found = db.query(&format!(
            "SELECT count(*) FROM orders WHERE epoch = {epoch} AND id IN ({})",
            ids.join(",")
        ));
        assert_eq!(
            found,
            requests.to_string(),
            "{variant}: every 200's order, once"
        );
        let (status, recorded) = api.get(&format!("/orders/{}", report.orders[0])).await;
        assert_eq!(
            (status, &recorded["status"]),
            (200, &json!("sold")),
            "{recorded}"
        );
    }
    let (status, answer) = api.get("/orders/not-an-order?product=101").await;
    assert_eq!(status, 404, "{answer}");
}

/// PostgreSQL stopped under load: sales go on (no 5xx), the backlog waits in the streams;
/// started again, it drains by itself and the stores agree. `GET /orders/{id}` says
/// pending, then recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sales_go_on_while_postgres_is_down_and_the_backlog_drains() {
    let _turn = seckill_testkit::heavy_turn().await;
    let mut db = Postgres::start();
    let (cluster, _nginx, api) = with_database(&db);
    api.reset("101", 5_000, 1).await;
    let warm = api
        .run(api.load("101", "lua").requests(200).concurrency(20))
        .await;
    assert_eq!(warm.count(200), 200);
    db.stop();
    let load = api
        .load("101", "lua")
        .requests(1_000)
        .concurrency(50)
        .keeping_orders();
    let report = api.run(load).await;
    assert_eq!(
        report.count(200),
        1_000,
        "no sale waits for the database: {report:?}"
    );
    let stats = api.stats("101").await;
    let record = &stats["orders_of_record"];
    assert!(record["backlog"].as_i64().unwrap_or(0) > 0, "{stats}");
    assert_eq!(record["in_database"], Value::Null, "{stats}");
    let order = &report.orders[0];
    let (status, pending) = api.get(&format!("/orders/{order}?product=101")).await;
    assert_eq!(status, 503, "the database is away: {pending}");
    // /metrics: each consumer's look at the same backlog (once a second), from any instance.
    let backlog = metric_within(&cluster, "seckill_orders_backlog", |v| v > 0.0).await;
    println!("/metrics while the database is away: backlog {backlog}");

    db.restart();
    let stats = drained(&api, "101", Duration::from_secs(30)).await;
    let record = &stats["orders_of_record"];
    println!("after the restart: {record}");
    assert_eq!(record["drift"], 0, "{stats}");
    assert_eq!(record["in_database"], 1_200, "{stats}");
    metric_within(&cluster, "seckill_orders_backlog", |v| v == 0.0).await;
    let (status, recorded) = api.get(&format!("/orders/{order}")).await;
    assert_eq!(status, 200, "{recorded}");
    assert_eq!(recorded["state"], "recorded");
    assert_eq!(recorded["order"]["id"], order.as_str());
}

/// PostgreSQL frozen (SIGSTOP, every process of it) with the instance's connections open,
/// as a host gone without a reset leaves them: a look-up of an order is answered `503
/// database_unavailable` once the orders' bound runs out — not held until the request
/// timeout (`408`), which no call to the database had before. Thawed, it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_orders_database_is_a_503_not_a_hang() {
    let _turn = seckill_testkit::heavy_turn().await;
    let db = Postgres::start();
    let (cluster, _nginx, api) = with_database(&db);
    api.reset("101", 100, 1).await;
    let report = api
        .run(api.load("101", "lua").requests(5).keeping_orders())
        .await;
    assert_eq!(report.count(200), 5, "{report:?}");
    drained(&api, "101", Duration::from_secs(30)).await;
    let instance = &cluster.apis()[0];
    let path = format!("/orders/{}", report.orders[0]);
    // The instance's pool holds a connection that answered: the next look-up takes it.
    let (status, recorded) = instance.get(&path).await;
    assert_eq!(status, 200, "{recorded}");

    struct Thaw<'a>(&'a Postgres);
    impl Drop for Thaw<'_> {
        fn drop(&mut self) {
            self.0.signal_all("CONT");
        }
    }
    db.signal_all("STOP");
    let thaw = Thaw(&db);
    let (status, answer) = instance.get(&path).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["outcome"], "database_unavailable", "{answer}");
    drop(thaw);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, answer) = instance.get(&path).await;
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "thawed, still {status}: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A consumer's instance SIGKILLed with entries pending (read, not yet in the database: it
/// was down): the other instance claims them after `--orders-claim-ms` and inserts them;
/// no order lost, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_consumers_pending_orders_are_claimed_by_another() {
    let _turn = seckill_testkit::heavy_turn().await;
    let mut db = Postgres::start();
    // Small reads, so that both consumers hold some: a lua call's sales share one entry,
    // and one read of the default 500 entries could take them all.
    let (mut cluster, _nginx, api) = with_database_and(&db, &["--orders-batch", "5"]);
    api.reset("101", 5_000, 1).await;
    db.stop();
    let report = api
        .run(api.load("101", "lua").requests(2_000).concurrency(50))
        .await;
    assert_eq!(report.count(200), 2_000, "{report:?}");
    // Both consumers have read entries they could not insert.
    let stream = crate::keys("101").whole().stream.clone();
    let dying = cluster.instances[0].addr.to_string();
    let mut redis = cluster.redis.conn().await;
    let mut held = 0;
    for _ in 0..50 {
        let summary: redis::Value = redis::cmd("XPENDING")
            .arg(&stream)
            .arg("orders")
            .query_async(&mut redis)
            .await
            .unwrap();
        held = pending_of(&summary, &dying);
        if held > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(held > 0, "the instance to kill holds pending entries");
    cluster.instances[0].kill();
    db.restart();
    let survivor = cluster.api(1);
    let stats = drained(&survivor, "101", Duration::from_secs(30)).await;
    let record = &stats["orders_of_record"];
    println!("{held} entries were pending with the killed instance; then: {record}");
    assert_eq!(record["drift"], 0, "{stats}");
    assert_eq!(record["in_database"], 2_000, "{stats}");
    assert_eq!(
        db.query("SELECT count(*) - count(DISTINCT id) FROM orders"),
        "0",
        "no order twice"
    );
    let claimed = survivor.metric("seckill_orders_claimed_total").await;
    assert!(
        claimed >= held as f64,
        "the survivor claimed them: {claimed} < {held}"
    );
}

/// From an `XPENDING` summary, the entries `consumer` holds.
fn pending_of(summary: &redis::Value, consumer: &str) -> i64 {
    let redis::Value::Array(parts) = summary else {
        return 0;
    };
    let Some(redis::Value::Array(consumers)) = parts.get(3) else {
        return 0;
    };
    consumers
        .iter()
        .filter_map(|c| match c {
            redis::Value::Array(pair) => {
                let name: String = redis::from_redis_value(pair.first()?.clone()).ok()?;
                let count: String = redis::from_redis_value(pair.get(1)?.clone()).ok()?;
                (name == consumer).then(|| count.parse::<i64>().ok())?
            }
            _ => None,
        })
        .sum()
}

/// Redis SIGKILLed under load and restarted on its AOF: the streams survive with the stock
/// (`appendfsync always`), and once drained every order in Redis — every 200's among them —
/// is in the database, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_streams_survive_a_redis_crash_with_the_stock() {
    let _turn = seckill_testkit::heavy_turn().await;
    let db = Postgres::start();
    let (mut cluster, _nginx, api) = with_database(&db);
    api.reset("101", 10_000, 1).await;
    let control = seckill_testkit::Control::default();
    let load = api
        .load("101", "lua")
        .requests(3_000)
        .concurrency(50)
        .keeping_orders();
    let running = api.spawn(load, &control);
    for _ in 0..3_000 {
        if control.answered() >= 800 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cluster.redis.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.redis.restart();
    let report = running.await.expect("the load");
    let stats = drained(&api, "101", Duration::from_secs(30)).await;
    let record = &stats["orders_of_record"];
    println!("{:?}; then {record}", report.statuses);
    assert_eq!(record["drift"], 0, "{stats}");
    assert_eq!(record["in_database"], int(&stats, "sold"), "{stats}");
    let ids: Vec<String> = report.orders.iter().map(|o| format!("'{o}'")).collect();
    let found = db.query(&format!(
        "SELECT count(*) FROM orders WHERE id IN ({})",
        ids.join(",")
    ));
    assert_eq!(found, report.orders.len().to_string(), "every 200's order");
}

/// The bench's orders suite: lua and watchdog with their orders streamed into PostgreSQL
/// and kept in Redis only, from one run; a streamed row's orders all reach the database
/// (the bench waits for it and times the drain), a row kept in Redis streams none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_measures_what_the_database_costs() {
    let _turn = seckill_testkit::heavy_turn().await;
    let db = Postgres::start();
    let (cluster, nginx, _api) = with_database(&db);
    let (url, redis_url) = (nginx.url(""), cluster.redis.url());
    let args = bench_args(&[
        "--suite",
        "orders",
        "--rounds",
        "1",
        "--requests",
        "100",
        "--concurrency",
        "20",
        "--url",
        &url,
        "--redis-url",
        &redis_url,
    ]);
    let report = seckill_bench::run(args).await.expect("the suite ran");
    assert_eq!(report.rows.len(), 4);
    for row in &report.rows {
        let label = &row.scenario.label;
        assert_eq!(row.count(200) as i64, row.sold, "{label}");
        let record = &row.stats["orders_of_record"];
        assert_eq!(record["streamed"], row.scenario.orders, "{label}: {record}");
        assert_eq!(row.drain.is_some(), row.scenario.orders, "{label}");
        let epoch = int(&row.stats, "epoch");
        let in_database = db.query(&format!(
            "SELECT count(*) FROM orders WHERE product = '101' AND epoch = {epoch}"
        ));
        let expected = if row.scenario.orders { row.sold } else { 0 };
        assert_eq!(in_database, expected.to_string(), "{label}");
    }
    for name in [
        "orders of record cost, lua",
        "orders of record cost, watchdog",
        "orders drain, lua",
    ] {
        let ratio = report.ratios.iter().find(|r| r.name == name);
        assert!(
            ratio.is_some_and(|r| r.value > 0.0),
            "{name}: {:?}",
            report.ratios
        );
    }
}
