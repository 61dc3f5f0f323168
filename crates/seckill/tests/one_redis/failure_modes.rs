//! Every failure of the progression, reproduced on demand with real Redis and two real
//! instances (started with `--faults`): setnx's deadlock and its DEL of another's lock,
//! token's second holder and its non-atomic release, and the watchdog holding where they
//! fail — also across a `kill -9`.

use std::time::Duration;

use redis::AsyncCommands;
use seckill_testkit::api::deduct_path;
use seckill_testkit::{
    Api, Service, assert_every_200_an_order, assert_exact, assert_sold_out, heavy_turn, int,
};
use serde_json::{Value, json};

use crate::{keys, service};

/// A deduction of product 101 sent to `api` in the background; its (status, body) later,
/// status 0 when no answer came (the instance was killed).
fn spawn_deduct(api: &Api, variant_and_knobs: &str) -> tokio::task::JoinHandle<(u16, Value)> {
    let (http, url) = (
        api.http().clone(),
        api.url(&deduct_path("101", variant_and_knobs)),
    );
    tokio::spawn(async move {
        let Ok(response) = http.post(url).send().await else {
            return (0, Value::Null);
        };
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or_default())
    })
}

/// Waits until the lock at `lock` is held by someone other than `not` (`None`: anyone),
/// and returns the holder's value: a request is inside its critical section (the bound
/// says a hang).
async fn held_by_another(
    redis: &mut redis::aio::MultiplexedConnection,
    lock: &str,
    not: Option<&str>,
) -> String {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let holder: Option<String> = redis.get(lock).await.unwrap();
        if let Some(holder) = holder.filter(|h| Some(h.as_str()) != not) {
            return holder;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "nobody new took {lock}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `requests` deductions of product 101 over both instances from `concurrency` clients.
async fn load(
    cluster: &Service,
    variant_and_knobs: &str,
    requests: usize,
    concurrency: usize,
) -> seckill_testkit::Report {
    let load = crate::spread(cluster, "101", variant_and_knobs)
        .requests(requests)
        .concurrency(concurrency);
    cluster.api(0).run(load).await
}

/// setnx: a holder that dies leaves the lock held forever, with no TTL; every later request
/// is 429 on both instances until an admin reset.
#[tokio::test]
async fn setnx_dead_holder_deadlocks_until_reset() {
    let cluster = service(2, &["--faults"]);
    let (a, b) = (cluster.api(0), cluster.api(1));
    a.reset("101", 10, 1).await;
    let (status, body) = a.deduct("101", "setnx?fault=abandon").await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["outcome"], "abandoned");
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in [0, 1, 0, 1] {
        let (status, body) = [&a, &b][i].deduct("101", "setnx").await;
        assert_eq!(status, 429, "instance {i}: {body}");
    }
    let stats = a.stats("101").await;
    assert_eq!(stats["locks"][0]["held"], true, "{stats}");
    assert_eq!(
        stats["locks"][0]["never_expires"], true,
        "setnx's lock has no TTL: {stats}"
    );
    assert_eq!(int(&stats, "remaining"), 10);
    assert_eq!(int(&stats, "lock_busy"), 4);

    a.reset("101", 10, 1).await;
    let (status, _) = b.deduct("101", "setnx").await;
    assert_eq!(status, 200, "reset frees the deadlock");
}

/// setnx: its DEL removes whoever holds the lock. A is slow; an operator deletes the
/// "stuck" lock; B takes it; A finishes and its DEL removes B's lock; C gets in while B
/// is still inside.
#[tokio::test]
async fn setnx_del_removes_a_lock_another_request_holds() {
    let cluster = service(2, &["--faults"]);
    let (a, b) = (cluster.api(0), cluster.api(1));
    a.reset("101", 10, 1).await;
    let mut redis = cluster.redis.conn().await;
    let lock = keys("101").whole().lock.clone();
    let first = spawn_deduct(&a, "setnx?work_ms=1000");
    // A is inside (Redis names it), then its lock is deleted.
    let a_holds = held_by_another(&mut redis, &lock, None).await;
    let (status, _) = a
        .post_json("/admin/unlock", &json!({ "product": "101" }))
        .await;
    assert_eq!(status, 200);
    let second = spawn_deduct(&b, "setnx?work_ms=2500");
    // B holds the lock (Redis names another holder), while A is still at work.
    held_by_another(&mut redis, &lock, Some(&a_holds)).await;
    assert!(!first.is_finished(), "A still works when B gets in");
    let (status, _) = first.await.unwrap();
    assert_eq!(status, 200);
    let held: bool = redis.exists(&lock).await.unwrap();
    assert!(!held, "A's DEL should have removed B's lock");
    assert!(!second.is_finished(), "B is still working");
    let (status, body) = a.deduct("101", "setnx").await;
    assert_eq!(status, 200, "C got in while B held the lock: {body}");
    let (status, _) = second.await.unwrap();
    assert_eq!(status, 200);
    let stats = a.stats("101").await;
    assert!(int(&stats, "lock_overlaps") >= 1, "{stats}");
}

/// token: with work_ms longer than ttl_ms the lock expires under its holder and a second
/// holder gets in; the audit counts the overlaps.
#[tokio::test]
async fn token_work_longer_than_ttl_lets_a_second_holder_in() {
    let cluster = service(2, &["--faults"]);
    let a = cluster.api(0);
    a.reset("101", 20, 1).await;
    let report = load(
        &cluster,
        "token?work_ms=300&ttl_ms=100&wait_ms=3000",
        20,
        10,
    )
    .await;
    let stats = a.stats("101").await;
    assert!(int(&stats, "lock_overlaps") > 0, "{stats}");
    assert_every_200_an_order(&report, &stats, "token");
}

/// token with the seed's non-atomic release: the holder checks the lock is its own,
/// pauses, and meanwhile the lock expires and passes to B; A's DEL then removes B's lock.
#[tokio::test]
async fn token_pause_between_check_and_delete_removes_anothers_lock() {
    let cluster = service(2, &["--faults"]);
    let (a, b) = (cluster.api(0), cluster.api(1));
    a.reset("101", 10, 1).await;
    let mut redis = cluster.redis.conn().await;
    let lock = keys("101").whole().lock.clone();
    let first = spawn_deduct(
        &a,
        "token?ttl_ms=200&fault=pause_before_release&pause_ms=800",
    );
    // A takes the lock (Redis names it), and B asks for it while A's TTL runs out under
    // A's pause; B gets it (Redis names B) while A still pauses.
    let a_token = held_by_another(&mut redis, &lock, None).await;
    let second = spawn_deduct(&b, "token?ttl_ms=10000&work_ms=2000&wait_ms=1000");
    held_by_another(&mut redis, &lock, Some(&a_token)).await;
    assert!(!first.is_finished(), "A still pauses when B gets in");
    let (status, _) = first.await.unwrap();
    assert_eq!(status, 200);
    let held: bool = redis.exists(&lock).await.unwrap();
    assert!(!held, "A's late DEL should have removed B's lock");
    let (status, body) = a.deduct("101", "token").await;
    assert_eq!(status, 200, "C got in while B held the lock: {body}");
    second.await.unwrap();
    let stats = a.stats("101").await;
    assert!(int(&stats, "lock_overlaps") >= 1, "{stats}");
}

/// watchdog: the token case's proportions (work three times the lease) give zero overlaps
/// and exact sales, because the watchdog renews the lease.
///
/// A lease renewed every third of it leaves two thirds for a renewal to be late: with the
/// token case's 100 ms, beside a 2,000-connection test or with a core taken a starved
/// renewal lost the lock (the commit is then refused, `lock_lost`, nothing oversold — but
/// the overlap happens). So the lease is 300 ms (200 ms for a late renewal) and the work
/// 900 ms, and it takes a heavy test's turn, as a watchdog in production wants a lease
/// well above its pauses.
#[tokio::test]
async fn watchdog_same_settings_give_zero_overlaps_and_exact_sales() {
    let _turn = heavy_turn().await;
    let cluster = service(2, &["--faults", "--lock-lease-ms", "300"]);
    let a = cluster.api(0);
    a.reset("101", 4, 1).await;
    let load = crate::spread(&cluster, "101", "watchdog?work_ms=900&wait_ms=10000")
        .requests(100)
        .concurrency(10)
        .until_sold_out();
    let report = a.run(load).await;
    let stats = a.stats("101").await;
    assert_eq!(report.count(200), 4, "{report:?}");
    assert_sold_out(&stats, 4, "watchdog");
    assert_eq!(int(&stats, "lock_lost"), 0, "{stats}");
}

/// watchdog: a holder that dies (fault=abandon) stops renewing, and its lock expires one
/// lease later; a waiter then gets it.
#[tokio::test]
async fn watchdog_abandoned_lock_frees_one_lease_later() {
    let cluster = service(2, &["--faults", "--lock-lease-ms", "1000"]);
    let (a, b) = (cluster.api(0), cluster.api(1));
    a.reset("101", 10, 1).await;
    let (status, body) = a.deduct("101", "watchdog?fault=abandon").await;
    assert_eq!(status, 500, "{body}");
    let stats = a.stats("101").await;
    let ttl = stats["locks"][0]["ttl_ms"]
        .as_i64()
        .expect("held with a lease");
    assert!(ttl > 0 && ttl <= 1000, "{stats}");
    let (status, _) = b.deduct("101", "watchdog?wait_ms=0").await;
    assert_eq!(status, 429, "still held within the lease");
    let (status, body) = b.deduct("101", "watchdog?wait_ms=5000").await;
    assert_eq!(status, 200, "the lock freed itself one lease later: {body}");
    let stats = a.stats("101").await;
    assert_eq!(int(&stats, "sold"), 1);
    assert_eq!(int(&stats, "lock_overlaps"), 0);
}

/// watchdog: an instance killed with SIGKILL while holding the lock frees it one lease
/// later, and the other instance carries on selling.
#[tokio::test]
async fn watchdog_killed_instance_frees_the_lock_one_lease_later() {
    let mut cluster = service(2, &["--faults", "--lock-lease-ms", "1000"]);
    let (a, b) = (cluster.api(0), cluster.api(1));
    a.reset("101", 10, 1).await;
    let mut redis = cluster.redis.conn().await;
    let lock = keys("101").whole().lock.clone();
    // The holder sells, then dies between its commit and its release.
    let dying = spawn_deduct(&a, "watchdog?fault=pause_before_release&pause_ms=5000");
    // The first instance has sold (its sale in the audit) and pauses holding the lock.
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while int(&b.stats("101").await, "sold") == 0 {
        assert!(
            tokio::time::Instant::now() < until,
            "the first sale never came"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let held: bool = redis.exists(&lock).await.unwrap();
    assert!(held, "the first instance holds the lock");
    cluster.instances[0].kill();
    assert_eq!(
        dying.await.unwrap().0,
        0,
        "the killed holder never answered"
    );
    let ttl: i64 = redis.pttl(&lock).await.unwrap();
    assert!(
        ttl > 0 && ttl <= 1000,
        "held, with at most one lease left: {ttl}"
    );
    let (status, _) = b.deduct("101", "watchdog?wait_ms=0").await;
    assert_eq!(
        status, 429,
        "nobody renews it, but it is held until the lease runs out"
    );
    let (status, body) = b.deduct("101", "watchdog?wait_ms=5000").await;
    assert_eq!(status, 200, "{body}");
    let stats = b.stats("101").await;
    assert_eq!(
        int(&stats, "sold"),
        2,
        "the dead holder's sale and the new one: {stats}"
    );
    assert_exact(&stats, 10, "watchdog");
}

/// watchdog with an explicit lease_ms shorter than the work: no watchdog (as in Redisson),
/// the lock expires and others get in — but the commit is fenced on still holding the
/// lock, so the late holder sells nothing (503 lock_lost) and nothing is oversold.
#[tokio::test]
async fn watchdog_explicit_short_lease_is_fenced_at_commit() {
    let cluster = service(2, &["--faults"]);
    let a = cluster.api(0);
    a.reset("101", 3, 1).await;
    let report = load(
        &cluster,
        "watchdog?work_ms=300&lease_ms=100&wait_ms=3000",
        12,
        6,
    )
    .await;
    let stats = a.stats("101").await;
    assert!(
        report.count(503) > 0,
        "late holders were refused: {report:?}"
    );
    assert!(int(&stats, "lock_lost") > 0, "{stats}");
    assert_eq!(int(&stats, "oversold"), 0, "{stats}");
    assert_every_200_an_order(&report, &stats, "watchdog");
}

/// segmented: no false sold-out while any shard still has stock, and 409 once all are empty.
#[tokio::test]
async fn segmented_sells_every_shard_before_sold_out() {
    let cluster = service(2, &[]);
    let (a, b) = (cluster.api(0), cluster.api(1));
    a.reset("101", 9, 8).await;
    for n in 0..9 {
        let (status, body) = [&a, &b][n % 2].deduct("101", "segmented").await;
        assert_eq!(status, 200, "unit {n}: {body}");
    }
    let (status, body) = a.deduct("101", "segmented").await;
    assert_eq!(status, 409, "{body}");
    let stats = a.stats("101").await;
    assert_eq!(
        stats["shard_remaining"],
        json!([0, 0, 0, 0, 0, 0, 0, 0]),
        "{stats}"
    );
    assert_eq!(int(&stats, "sold"), 9);
}

/// shares: an instance SIGKILLed while it holds a share of the stock. Its unsold units sit
/// in its share until the share's lease runs out; meanwhile the other instance, with the
/// pool empty, answers 429 (not 409: units exist); then the next take of a share gives them
/// back to the pool and it sells every one. Nothing is sold twice, nothing lost.
#[tokio::test]
async fn shares_of_a_killed_instance_come_back_after_their_lease() {
    let mut cluster = service(2, &["--share-lease-ms", "1500"]);
    let (a, b) = (cluster.api(0), cluster.api(1));
    a.reset("101", 40, 1).await;
    // The first instance takes a share of 15 and sells 3 of it, then dies.
    for _ in 0..3 {
        let (status, body) = a.deduct("101", "shares?share_units=15").await;
        assert_eq!(status, 200, "{body}");
    }
    cluster.instances[0].kill();
    let stats = b.stats("101").await;
    assert_eq!(
        int(&stats, "in_shares"),
        12,
        "the dead instance's share: {stats}"
    );

    // The other sells the pool (25 units), then finds only the dead share left.
    let mut sold = 0;
    loop {
        let (status, body) = b.deduct("101", "shares?share_units=15&wait_ms=0").await;
        match status {
            200 => sold += 1,
            429 => break,
            _ => panic!("{status}: {body}"),
        }
    }
    assert_eq!(sold, 25, "the pool, and no more");
    let stranded = std::time::Instant::now();
    // A buyer who waits longer than the lease gets one of the dead instance's units.
    let (status, body) = b.deduct("101", "shares?share_units=15&wait_ms=5000").await;
    assert_eq!(status, 200, "{body}");
    println!(
        "a dead instance's share came back {:.1} s after the pool ran dry (lease 1.5 s)",
        stranded.elapsed().as_secs_f64()
    );
    // The dead instance's clients are gone: the rest buy from the live one.
    let load = b
        .load("101", "shares?share_units=15")
        .requests(100)
        .concurrency(4);
    let report = b.run(load.until_sold_out()).await;
    let stats = b.stats("101").await;
    assert_eq!(int(&stats, "reclaimed"), 12, "{stats}");
    assert_sold_out(&stats, 40, "shares");
    assert_eq!(
        (3 + sold + 1 + report.count(200)) as i64,
        40,
        "every unit answered 200 once: {report:?}"
    );
    let (status, _) = b.deduct("101", "shares").await;
    assert_eq!(
        status, 409,
        "sold out once the pool and every share are empty"
    );
}

/// A store that fails under a holder does not leave its lock behind: the stock store goes
/// away after a setnx lock was taken on a lock store of its own (the fencing token is then
/// the step that fails), the answer is a clean 503, and the lock — which has no TTL, so
/// nothing else would ever free it — is given back.
#[tokio::test]
async fn a_lock_is_given_back_when_the_stock_store_fails_under_its_holder() {
    let mut stock = seckill_testkit::RedisServer::start();
    let locks = seckill_testkit::RedisServer::start();
    let instance = crate::instance(&stock.url(), &["--lock-redis-url", &locks.url()]);
    let api = instance.api();
    api.reset("101", 5, 1).await;
    stock.kill();
    let (status, body) = api.deduct("101", "setnx?fence=on").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["outcome"], "redis_unavailable", "{body}");
    let held: bool = locks
        .conn()
        .await
        .exists(keys("101").whole().lock.clone())
        .await
        .unwrap();
    assert!(!held, "the setnx lock was left behind, with no TTL");
}
