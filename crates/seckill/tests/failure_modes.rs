//! Every failure of the progression, reproduced on demand with real Redis and two real
//! instances (started with `--faults`): setnx's deadlock and its DEL of another's lock,
//! token's second holder and its non-atomic release, and the watchdog holding where they
//! fail — also across a `kill -9`.

mod common;

use std::time::Duration;

use common::{Cluster, int};
use redis::AsyncCommands;
use serde_json::json;

const LOCK: &str = "seckill:{101}:lock";

/// Starts `path` on instance `i` in the background; returns the (status, body) later.
fn spawn_post(
    cluster: &Cluster,
    i: usize,
    path: &str,
) -> tokio::task::JoinHandle<(u16, serde_json::Value)> {
    let (http, url) = (cluster.http.clone(), cluster.instances[i].url(path));
    tokio::spawn(async move {
        // Status 0: no answer (the instance was killed).
        let Ok(response) = http.post(url).send().await else {
            return (0, serde_json::Value::Null);
        };
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or_default())
    })
}

async fn post_admin(cluster: &Cluster, path: &str, body: serde_json::Value) {
    let response = cluster
        .http
        .post(cluster.instances[0].url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
}

/// setnx: a holder that dies leaves the lock held forever, with no TTL; every later request
/// is 429 on both instances until an admin reset.
#[tokio::test]
async fn setnx_dead_holder_deadlocks_until_reset() {
    let cluster = Cluster::start(2, &["--faults"]);
    cluster.reset("101", 10, 1).await;
    let (status, body) = cluster.post(0, "/deduct_stock/setnx?fault=abandon").await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["outcome"], "abandoned");
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in [0, 1, 0, 1] {
        let (status, body) = cluster.post(i, "/deduct_stock/setnx").await;
        assert_eq!(status, 429, "instance {i}: {body}");
    }
    let stats = cluster.stats("101").await;
    assert_eq!(stats["locks"][0]["held"], true, "{stats}");
    assert_eq!(
        stats["locks"][0]["never_expires"], true,
        "setnx's lock has no TTL: {stats}"
    );
    assert_eq!(int(&stats, "remaining"), 10);
    assert_eq!(int(&stats, "lock_busy"), 4);

    cluster.reset("101", 10, 1).await;
    let (status, _) = cluster.post(1, "/deduct_stock/setnx").await;
    assert_eq!(status, 200, "reset frees the deadlock");
}

/// setnx: its DEL removes whoever holds the lock. A is slow; an operator deletes the
/// "stuck" lock; B takes it; A finishes and its DEL removes B's lock; C gets in while B
/// is still inside.
#[tokio::test]
async fn setnx_del_removes_a_lock_another_request_holds() {
    let cluster = Cluster::start(2, &["--faults"]);
    cluster.reset("101", 10, 1).await;
    let mut redis = cluster.redis.conn().await;
    let a = spawn_post(&cluster, 0, "/deduct_stock/setnx?work_ms=1000");
    tokio::time::sleep(Duration::from_millis(200)).await;
    post_admin(&cluster, "/admin/unlock", json!({ "product": "101" })).await;
    let b = spawn_post(&cluster, 1, "/deduct_stock/setnx?work_ms=2500");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let holder: Option<String> = redis.get(LOCK).await.unwrap();
    assert!(holder.is_some(), "B holds the lock");
    let (status, _) = a.await.unwrap();
    assert_eq!(status, 200);
    let held: bool = redis.exists(LOCK).await.unwrap();
    assert!(!held, "A's DEL should have removed B's lock");
    assert!(!b.is_finished(), "B is still working");
    let (status, body) = cluster.post(0, "/deduct_stock/setnx").await;
    assert_eq!(status, 200, "C got in while B held the lock: {body}");
    let (status, _) = b.await.unwrap();
    assert_eq!(status, 200);
    let stats = cluster.stats("101").await;
    assert!(int(&stats, "lock_overlaps") >= 1, "{stats}");
}

/// token: with work_ms longer than ttl_ms the lock expires under its holder and a second
/// holder gets in; the audit counts the overlaps.
#[tokio::test]
async fn token_work_longer_than_ttl_lets_a_second_holder_in() {
    let cluster = Cluster::start(2, &["--faults"]);
    cluster.reset("101", 20, 1).await;
    let report = cluster
        .load(
            "/deduct_stock/token?work_ms=300&ttl_ms=100&wait_ms=3000",
            20,
            10,
            false,
        )
        .await;
    let stats = cluster.stats("101").await;
    assert!(int(&stats, "lock_overlaps") > 0, "{stats}");
    assert_eq!(int(&stats, "sold") as usize, report.count(200), "{stats}");
}

/// token with the seed's non-atomic release: the holder checks the lock is its own,
/// pauses, and meanwhile the lock expires and passes to B; A's DEL then removes B's lock.
#[tokio::test]
async fn token_pause_between_check_and_delete_removes_anothers_lock() {
    let cluster = Cluster::start(2, &["--faults"]);
    cluster.reset("101", 10, 1).await;
    let mut redis = cluster.redis.conn().await;
    let a = spawn_post(
        &cluster,
        0,
        "/deduct_stock/token?ttl_ms=200&fault=pause_before_release&pause_ms=800",
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    let b = spawn_post(
        &cluster,
        1,
        "/deduct_stock/token?ttl_ms=10000&work_ms=2000&wait_ms=1000",
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b_token: Option<String> = redis.get(LOCK).await.unwrap();
    assert!(b_token.is_some(), "B holds the lock");
    let (status, _) = a.await.unwrap();
    assert_eq!(status, 200);
    let held: bool = redis.exists(LOCK).await.unwrap();
    assert!(!held, "A's late DEL should have removed B's lock");
    let (status, body) = cluster.post(0, "/deduct_stock/token").await;
    assert_eq!(status, 200, "C got in while B held the lock: {body}");
    b.await.unwrap();
    let stats = cluster.stats("101").await;
    assert!(int(&stats, "lock_overlaps") >= 1, "{stats}");
}

/// watchdog: the same settings as the token case (work three times the lease) give zero
/// overlaps and exact sales, because the watchdog renews the lease.
#[tokio::test]
async fn watchdog_same_settings_give_zero_overlaps_and_exact_sales() {
    let cluster = Cluster::start(2, &["--faults", "--lock-lease-ms", "100"]);
    cluster.reset("101", 8, 1).await;
    let report = cluster
        .load(
            "/deduct_stock/watchdog?work_ms=300&wait_ms=10000",
            200,
            10,
            true,
        )
        .await;
    let stats = cluster.stats("101").await;
    assert_eq!(report.count(200), 8, "{report:?}");
    assert_eq!(int(&stats, "sold"), 8, "{stats}");
    assert_eq!(int(&stats, "remaining"), 0, "{stats}");
    assert_eq!(int(&stats, "lock_overlaps"), 0, "{stats}");
    assert_eq!(int(&stats, "lock_lost"), 0, "{stats}");
    assert_eq!(int(&stats, "oversold"), 0, "{stats}");
}

/// watchdog: a holder that dies (fault=abandon) stops renewing, and its lock expires one
/// lease later; a waiter then gets it.
#[tokio::test]
async fn watchdog_abandoned_lock_frees_one_lease_later() {
    let cluster = Cluster::start(2, &["--faults", "--lock-lease-ms", "1000"]);
    cluster.reset("101", 10, 1).await;
    let (status, body) = cluster
        .post(0, "/deduct_stock/watchdog?fault=abandon")
        .await;
    assert_eq!(status, 500, "{body}");
    let stats = cluster.stats("101").await;
    let ttl = stats["locks"][0]["ttl_ms"]
        .as_i64()
        .expect("held with a lease");
    assert!(ttl > 0 && ttl <= 1000, "{stats}");
    let (status, _) = cluster.post(1, "/deduct_stock/watchdog?wait_ms=0").await;
    assert_eq!(status, 429, "still held within the lease");
    let (status, body) = cluster.post(1, "/deduct_stock/watchdog?wait_ms=5000").await;
    assert_eq!(status, 200, "the lock freed itself one lease later: {body}");
    let stats = cluster.stats("101").await;
    assert_eq!(int(&stats, "sold"), 1);
    assert_eq!(int(&stats, "lock_overlaps"), 0);
}

/// watchdog: an instance killed with SIGKILL while holding the lock frees it one lease
/// later, and the other instance carries on selling.
#[tokio::test]
async fn watchdog_killed_instance_frees_the_lock_one_lease_later() {
    let mut cluster = Cluster::start(2, &["--faults", "--lock-lease-ms", "1000"]);
    cluster.reset("101", 10, 1).await;
    let mut redis = cluster.redis.conn().await;
    // The holder sells, then dies between its commit and its unlock.
    let dying = spawn_post(
        &cluster,
        0,
        "/deduct_stock/watchdog?fault=pause_before_release&pause_ms=5000",
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held: bool = redis.exists(LOCK).await.unwrap();
    assert!(held, "the first instance holds the lock");
    cluster.instances[0].kill();
    assert_eq!(
        dying.await.unwrap().0,
        0,
        "the killed holder never answered"
    );
    let ttl: i64 = redis.pttl(LOCK).await.unwrap();
    assert!(
        ttl > 0 && ttl <= 1000,
        "held, with at most one lease left: {ttl}"
    );
    let (status, _) = cluster.post(1, "/deduct_stock/watchdog?wait_ms=0").await;
    assert_eq!(
        status, 429,
        "nobody renews it, but it is held until the lease runs out"
    );
    let (status, body) = cluster.post(1, "/deduct_stock/watchdog?wait_ms=5000").await;
    assert_eq!(status, 200, "{body}");
    let stats = cluster.get(1, "/stats").await.1;
    assert_eq!(
        int(&stats, "sold"),
        2,
        "the dead holder's sale and the new one: {stats}"
    );
    assert_eq!(int(&stats, "remaining"), 8, "{stats}");
    assert_eq!(int(&stats, "lock_overlaps"), 0, "{stats}");
}

/// watchdog with an explicit lease_ms shorter than the work: no watchdog (as in Redisson),
/// the lock expires and others get in — but the commit is fenced on still holding the
/// lock, so the late holder sells nothing (503 lock_lost) and nothing is oversold.
#[tokio::test]
async fn watchdog_explicit_short_lease_is_fenced_at_commit() {
    let cluster = Cluster::start(2, &["--faults"]);
    cluster.reset("101", 3, 1).await;
    let report = cluster
        .load(
            "/deduct_stock/watchdog?work_ms=300&lease_ms=100&wait_ms=3000",
            12,
            6,
            false,
        )
        .await;
    let stats = cluster.stats("101").await;
    assert!(
        report.count(503) > 0,
        "late holders were refused: {report:?}"
    );
    assert!(int(&stats, "lock_lost") > 0, "{stats}");
    assert_eq!(int(&stats, "oversold"), 0, "{stats}");
    assert_eq!(int(&stats, "sold") as usize, report.count(200), "{stats}");
}

/// segmented: no false sold-out while any shard still has stock, and 409 once all are empty.
#[tokio::test]
async fn segmented_sells_every_shard_before_sold_out() {
    let cluster = Cluster::start(2, &[]);
    cluster.reset("101", 9, 8).await;
    for n in 0..9 {
        let (status, body) = cluster.post(n % 2, "/deduct_stock/segmented").await;
        assert_eq!(status, 200, "unit {n}: {body}");
    }
    let (status, body) = cluster.post(0, "/deduct_stock/segmented").await;
    assert_eq!(status, 409, "{body}");
    let stats = cluster.stats("101").await;
    assert_eq!(
        stats["shard_remaining"],
        json!([0, 0, 0, 0, 0, 0, 0, 0]),
        "{stats}"
    );
    assert_eq!(int(&stats, "sold"), 9);
}

/// shares: an instance SIGKILLed while it holds a share of the stock. Its unsold units sit
/// in its claim until the claim's lease runs out; meanwhile the other instance, with the
/// pool empty, answers 429 (not 409: units exist); then the next claim gives them back to
/// the pool and it sells every one. Nothing is sold twice, nothing lost.
#[tokio::test]
async fn shares_of_a_killed_instance_come_back_after_their_lease() {
    let mut cluster = Cluster::start(2, &["--share-lease-ms", "1500"]);
    cluster.reset("101", 40, 1).await;
    // The first instance claims a share of 15 and sells 3 of it, then dies.
    for _ in 0..3 {
        let (status, body) = cluster.post(0, "/deduct_stock/shares?share_units=15").await;
        assert_eq!(status, 200, "{body}");
    }
    cluster.instances[0].kill();
    let stats = cluster.get(1, "/stats").await.1;
    assert_eq!(
        int(&stats, "in_shares"),
        12,
        "the dead instance's share: {stats}"
    );

    // The other sells the pool (25 units), then finds only the dead share left.
    let mut sold = 0;
    loop {
        let (status, body) = cluster
            .post(1, "/deduct_stock/shares?share_units=15&wait_ms=0")
            .await;
        match status {
            200 => sold += 1,
            429 => break,
            _ => panic!("{status}: {body}"),
        }
    }
    assert_eq!(sold, 25, "the pool, and no more");
    let stranded = std::time::Instant::now();
    // A buyer who waits longer than the lease gets one of the dead instance's units.
    let (status, body) = cluster
        .post(1, "/deduct_stock/shares?share_units=15&wait_ms=5000")
        .await;
    assert_eq!(status, 200, "{body}");
    println!(
        "a dead instance's share came back {:.1} s after the pool ran dry (lease 1.5 s)",
        stranded.elapsed().as_secs_f64()
    );
    let report = cluster
        .load("/deduct_stock/shares?share_units=15", 100, 4, true)
        .await;
    let stats = cluster.get(1, "/stats").await.1;
    assert_eq!(int(&stats, "reclaimed"), 12, "{stats}");
    assert_eq!(int(&stats, "sold"), 40, "{stats}");
    assert_eq!(int(&stats, "remaining"), 0, "{stats}");
    assert_eq!(int(&stats, "oversold"), 0, "{stats}");
    assert_eq!(int(&stats, "lost_updates"), 0, "{stats}");
    assert_eq!(
        (3 + sold + 1 + report.count(200)) as i64,
        40,
        "every unit answered 200 once: {report:?}"
    );
    let (status, _) = cluster.post(1, "/deduct_stock/shares").await;
    assert_eq!(
        status, 409,
        "sold out once the pool and every share are empty"
    );
}
