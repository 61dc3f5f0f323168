//! The database as a lock store and a stock store (seed 003's first row): the `pg_*`
//! variants on a real PostgreSQL, two instances behind Nginx.

use std::time::{Duration, Instant};

use seckill::variants::{VARIANTS, Variant};
use seckill_testkit::{Api, Nginx, Postgres, Service, int};
use serde_json::json;

use crate::SECKILL;
use crate::variants::path;

/// Two instances with `--orders-db` (and `more`), and Nginx.
fn with_database(db: &Postgres, more: &[&str]) -> (Service, Nginx, Api) {
    let url = db.url();
    let mut args = vec!["--orders-db", &url];
    args.extend_from_slice(more);
    let cluster = Service::start(SECKILL, 2, &args);
    let nginx = Nginx::start(&cluster.instances);
    let api = Api::new(&nginx.url(""));
    (cluster, nginx, api)
}

/// The variants on PostgreSQL, from the registry: its locks (stock in Redis) and its
/// stock.
fn on_postgres() -> Vec<Variant> {
    VARIANTS
        .iter()
        .copied()
        .filter(|v| v.name().starts_with("pg_"))
        .collect()
}

/// A new sale of `stock` units of `product`, where `variant` sells it.
async fn reset_for(api: &Api, variant: Variant, product: &str, stock: i64) {
    let stock_in = if variant.spec().stock_in_database {
        "postgres"
    } else {
        "redis"
    };
    let reset = api
        .reset_with(json!({"product": product, "stock": stock, "stock_in": stock_in}))
        .await;
    assert_eq!(reset["stock_in"], stock_in, "{reset}");
}

/// Every `pg_*` variant sells exactly its stock under 200 connections through Nginx from
/// two instances: nothing oversold or lost, no two holders inside at once, every 200 an
/// order — for the stock variants, counted from the database itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pg_variant_sells_exactly_its_stock_under_200_connections() {
    let _turn = seckill_testkit::heavy_turn().await;
    let db = Postgres::start();
    let (_cluster, _nginx, api) = with_database(&db, &[]);
    let stock = 150;
    for variant in on_postgres() {
        reset_for(&api, variant, "101", stock).await;
        // pg_version conflicts under 200 connections: it retries more, and runs in rounds.
        let knobs = path(variant, &[("retries", "10"), ("wait_ms", "10000")]);
        let mut orders = Vec::new();
        for _ in 0..20 {
            let load = api
                .load("101", &knobs)
                .requests(400)
                .concurrency(200)
                .keeping_orders();
            let report = api.run(load).await;
            // Sold, sold out, or (pg_version) a conflict past its retries: nothing else.
            let answered: usize = [200, 409, 429].iter().map(|s| report.count(*s)).sum();
            assert_eq!(answered, 400, "{variant}: {:?}", report.statuses);
            orders.extend(report.orders);
            if int(&api.stats("101").await, "remaining") == 0 {
                break;
            }
        }
        let stats = api.stats("101").await;
        assert_eq!(int(&stats, "sold"), stock, "{variant}: {stats}");
        assert_eq!(int(&stats, "remaining"), 0, "{variant}: {stats}");
        assert_eq!(int(&stats, "oversold"), 0, "{variant}: {stats}");
        assert_eq!(int(&stats, "lost_updates"), 0, "{variant}: {stats}");
        assert_eq!(int(&stats, "lock_overlaps"), 0, "{variant}: {stats}");
        assert_eq!(orders.len(), stock as usize, "{variant}: one 200 per unit");
        assert_eq!(
            stats["by_instance"].as_object().map(|o| o.len()),
            Some(2),
            "{variant}: both instances sold: {stats}"
        );
        if variant.spec().stock_in_database {
            assert_eq!(stats["stock_in"], "postgres", "{variant}");
            let ids: Vec<String> = orders.iter().map(|o| format!("'{o}'")).collect();
            let found = db.query(&format!(
                "SELECT count(*) FROM orders WHERE product = '101' AND epoch = {} \
                 AND variant = '{variant}' AND id IN ({})",
                int(&stats, "epoch"),
                ids.join(",")
            ));
            assert_eq!(found, stock.to_string(), "{variant}: every 200's order row");
            let row = db.query("SELECT stock FROM seckill_stock WHERE product = '101'");
            assert_eq!(row, "0", "{variant}: the row itself");
        }
    }
}

/// Seed 003's flaw of the database lock, against PostgreSQL's own: a `pg_unique` holder
/// that dies leaves its row, and the product stays locked until an operator clears it;
/// a `pg_advisory` holder that dies frees its lock with its connection, at once. With
/// `lease_ms`, `pg_unique`'s row is taken over once its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_unique_holder_deadlocks_and_a_dead_advisory_holder_frees_at_once() {
    let _turn = seckill_testkit::heavy_turn().await;
    let db = Postgres::start();
    let (_cluster, _nginx, api) = with_database(&db, &["--faults"]);
    api.reset("101", 10, 1).await;

    let (status, died) = api.deduct("101", "pg_unique?fault=abandon").await;
    assert_eq!(
        (status, &died["outcome"]),
        (500, &json!("abandoned")),
        "{died}"
    );
    assert_eq!(
        db.query("SELECT count(*) FROM seckill_locks"),
        "1",
        "the dead holder's row stays"
    );
    let (status, busy) = api.deduct("101", "pg_unique?wait_ms=1000").await;
    assert_eq!(
        (status, &busy["outcome"]),
        (429, &json!("lock_busy")),
        "{busy}"
    );
    // Until an operator deletes the row.
    let (status, unlocked) = api
        .post_json("/admin/unlock", &json!({"product": "101"}))
        .await;
    assert_eq!((status, int(&unlocked, "freed")), (200, 1), "{unlocked}");
    assert_eq!(db.query("SELECT count(*) FROM seckill_locks"), "0");
    let (status, sold) = api.deduct("101", "pg_unique?wait_ms=1000").await;
    assert_eq!(status, 200, "after the row is deleted: {sold}");

    // With a lease the row is taken over once it runs out: the deadlock lasts one lease.
    // Not before: while the database's clock says the dead row's lease runs, a buyer who
    // does not wait is turned away; one who waits longer than the lease gets it.
    api.deduct("101", "pg_unique?fault=abandon&lease_ms=3000")
        .await;
    assert_eq!(
        db.query("SELECT count(*) FROM seckill_locks WHERE lock_until > clock_timestamp()"),
        "1",
        "the dead holder's row, its lease running"
    );
    let (status, busy) = api.deduct("101", "pg_unique?lease_ms=500&wait_ms=0").await;
    assert_eq!(
        (status, &busy["outcome"]),
        (429, &json!("lock_busy")),
        "not taken over within the lease: {busy}"
    );
    let (status, sold) = api
        .deduct("101", "pg_unique?lease_ms=500&wait_ms=10000")
        .await;
    assert_eq!(status, 200, "taken over after the lease: {sold}");

    // The advisory lock goes with its connection: once PostgreSQL has seen the dead
    // holder's connection close (no advisory lock left in pg_locks; the bound says a
    // hang), a buyer who does not wait at all gets it.
    let (status, died) = api.deduct("101", "pg_advisory?fault=abandon").await;
    assert_eq!(status, 500, "{died}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while db.query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") != "0" {
        assert!(
            Instant::now() < deadline,
            "the advisory lock was not freed with its holder's connection"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, sold) = api.deduct("101", "pg_advisory?wait_ms=0").await;
    assert_eq!(status, 200, "{sold}");
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "lock_overlaps"), 0, "{stats}");
    assert_eq!(int(&stats, "sold"), 3, "{stats}");
}

/// PostgreSQL stopped under `pg_update` load: clean 503s at once (no hang, no 500), nothing
/// answered 200 is lost; started again, sales go on by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_under_pg_update_is_503_at_once_and_sales_resume() {
    let _turn = seckill_testkit::heavy_turn().await;
    let mut db = Postgres::start();
    let (_cluster, _nginx, api) = with_database(&db, &[]);
    let reset = api
        .reset_with(json!({"product": "101", "stock": 100_000, "stock_in": "postgres"}))
        .await;
    assert_eq!(reset["stock_in"], "postgres");
    let mut orders = Vec::new();
    let load = || {
        api.load("101", "pg_update")
            .requests(300)
            .concurrency(20)
            .keeping_orders()
    };
    let before = api.run(load()).await;
    assert_eq!(before.count(200), 300, "{before:?}");
    orders.extend(before.orders);

    db.stop();
    let during = api.run(load()).await;
    assert_eq!(during.count(200), 0, "{during:?}");
    assert_eq!(during.count(503), 300, "only clean 503s: {during:?}");
    // At once: answered because the connection to the database failed, not because a
    // timeout ran out (the pool's wait for a slot, the connect's).
    let (status, answer) = api.deduct("101", "pg_update").await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["outcome"], "database_unavailable", "{answer}");
    let error = answer["error"].as_str().unwrap_or_default().to_lowercase();
    assert!(
        error.contains("error connecting")
            && !error.contains("timeout")
            && !error.contains("timed out"),
        "{answer}"
    );

    db.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = api.deduct("101", "pg_update").await;
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no sale once PostgreSQL was back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = api.run(load()).await;
    assert_eq!(after.count(200), 300, "{after:?}");
    orders.extend(after.orders);
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "oversold"), 0, "{stats}");
    assert_eq!(int(&stats, "lost_updates"), 0, "{stats}");
    let ids: Vec<String> = orders.iter().map(|o| format!("'{o}'")).collect();
    let found = db.query(&format!(
        "SELECT count(*) FROM orders WHERE id IN ({})",
        ids.join(",")
    ));
    assert_eq!(
        found,
        orders.len().to_string(),
        "every 200 acknowledged is in the database"
    );
}

/// Where the stock is decides who sells it, each way with a clear 400; a stock variant
/// takes no `Idempotency-Key` (its sale and the key would be in two stores); a reset into
/// the database is unsplit, and needs the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stock_is_sold_only_where_it_is() {
    let db = Postgres::start();
    let (_cluster, _nginx, api) = with_database(&db, &[]);
    api.reset_with(json!({"product": "101", "stock": 5, "stock_in": "postgres"}))
        .await;
    api.reset("202", 5, 1).await;
    for (product, variant) in [("101", "lua"), ("101", "pg_unique"), ("202", "pg_update")] {
        let (status, answer) = api.deduct(product, variant).await;
        assert_eq!(status, 400, "{variant} on {product}: {answer}");
    }
    let (status, answer) = api.deduct("303", "pg_for_update").await;
    assert_eq!(status, 404, "never reset: {answer}");
    let (status, answer, _) = api.deduct_keyed("101", "pg_update", "k-1").await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = api
        .post_json(
            "/admin/reset",
            &json!({"product": "101", "stock": 5, "shards": 4, "stock_in": "postgres"}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = api
        .post_json(
            "/admin/reset",
            &json!({"product": "101", "stock": 5, "stock_in": "mongodb"}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    // Nothing sold by any of it.
    assert_eq!(int(&api.stats("101").await, "remaining"), 5);
    assert_eq!(int(&api.stats("202").await, "remaining"), 5);
}

/// An acquire of either database lock cut short at many points (a `timeout` around it,
/// swept over sub-millisecond steps), with the lock free and with it held: nothing
/// outlives the cut — no `pg_unique` row but the holder's, no advisory lock but the
/// holder's, no transaction left open on a pooled connection — and the holder still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_database_acquire_leaves_nothing_behind() {
    use seckill::database::Database;
    use seckill::database::locks::{AdvisoryLock, UniqueLock};
    use seckill_lock::Lock;
    use std::sync::Arc;

    let pg = Postgres::start();
    let timeout = Duration::from_secs(5);
    seckill::orders::OrdersDb::new(&pg.url(), timeout)
        .unwrap()
        .migrate()
        .await
        .unwrap();
    let db = Arc::new(Database::new(&pg.url(), 8, timeout).unwrap());
    let rows = || pg.query("SELECT count(*) FROM seckill_locks");
    let advisory = || pg.query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'");
    let cuts = || (0..60u64).map(|n| Duration::from_micros(n * 53));
    let settled = |what: &str, wanted: &str, read: &dyn Fn() -> String| {
        let until = Instant::now() + Duration::from_secs(3);
        loop {
            let now = read();
            if now == wanted {
                return;
            }
            assert!(Instant::now() < until, "{what}: {now}, not {wanted}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    for held in [false, true] {
        let holder = if held {
            let lock = UniqueLock::new(db.clone(), "cut", "holder", None);
            Some(lock.try_acquire().await.unwrap().expect("free"))
        } else {
            None
        };
        for (i, cut) in cuts().enumerate() {
            let lock = UniqueLock::new(db.clone(), "cut", &format!("cut-{i}"), None);
            // Uncut acquires of a free lock are given back at once.
            if let Ok(Ok(Some(guard))) =
                tokio::time::timeout(cut, lock.try_acquire_for(Duration::from_millis(200))).await
            {
                guard.release().await.unwrap();
            }
        }
        settled("pg_unique rows", if held { "1" } else { "0" }, &rows);
        if let Some(holder) = holder {
            assert!(holder.release().await.unwrap(), "the holder still held it");
        }
        settled("pg_unique rows after the release", "0", &rows);

        let holder = if held {
            let lock = AdvisoryLock::new(db.clone(), "cut", "holder");
            Some(lock.try_acquire().await.unwrap().expect("free"))
        } else {
            None
        };
        for (i, cut) in cuts().enumerate() {
            let lock = AdvisoryLock::new(db.clone(), "cut", &format!("cut-{i}"));
            if let Ok(Ok(Some(guard))) =
                tokio::time::timeout(cut, lock.try_acquire_for(Duration::from_millis(200))).await
            {
                guard.release().await.unwrap();
            }
        }
        settled("advisory locks", if held { "1" } else { "0" }, &advisory);
        if let Some(holder) = holder {
            assert!(holder.release().await.unwrap(), "the holder still held it");
        }
        settled("advisory locks after the release", "0", &advisory);
        // Every pooled connection is usable: none was given back mid-transaction.
        let again = AdvisoryLock::new(db.clone(), "cut", "after");
        let guard = again.try_acquire().await.unwrap().expect("free");
        assert!(guard.release().await.unwrap());
    }
}

/// `pg_update`'s UPDATE waits on a row lock the test holds, past the call's bound: the
/// request gives up (its answer unknown) and PostgreSQL is asked to cancel the statement,
/// so no backend of the instance is left waiting on the lock — one past `--pg-connections`
/// each, and a sale for nobody once the lock came. Before, the connection was only closed,
/// which the waiting backend does not notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_that_outlives_its_bound_is_cancelled_not_left_waiting() {
    let _turn = seckill_testkit::heavy_turn().await;
    let db = Postgres::start();
    let (_cluster, _nginx, api) = with_database(
        &db,
        &[
            "--redis-timeout-ms",
            "200",
            "--redis-wait-timeout-ms",
            "100",
        ],
    );
    let reset = api
        .reset_with(json!({"product": "101", "stock": 10, "stock_in": "postgres"}))
        .await;
    assert_eq!(reset["stock_in"], "postgres");
    let (client, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute("BEGIN; SELECT stock FROM seckill_stock WHERE product = '101' FOR UPDATE")
        .await
        .unwrap();
    let answers =
        futures_util::future::join_all((0..4).map(|_| api.deduct("101", "pg_update"))).await;
    assert!(
        answers.iter().all(|(status, _)| *status != 200),
        "{answers:?}"
    );
    let waiting = "SELECT count(*) FROM pg_stat_activity
                   WHERE application_name = 'seckill' AND wait_event_type = 'Lock'";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = db.query(waiting);
        if left == "0" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} of the instance's statements still wait on the lock"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.batch_execute("ROLLBACK").await.unwrap();
    let stock = db.query("SELECT stock FROM seckill_stock WHERE product = '101'");
    assert_eq!(stock, "10", "a cancelled statement sold nothing");
}
