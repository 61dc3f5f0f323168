//! Idempotency keys: a click sent again — by the buyer, their client, or Nginx after an
//! instance died — sells once and gets the first answer again, in every variant.

use std::collections::BTreeSet;

use seckill_testkit::{Api, int};

use crate::{instance, keys, service};

/// Every variant of the progression on one Redis, with work inside its lock so that the
/// repeats arrive while the first is in flight, and the shards it sells.
fn variants() -> Vec<(String, u32)> {
    crate::variants::progression(&[("work_ms", "20")], 4)
        .into_iter()
        .map(|(_, path, shards)| (path, shards))
        .collect()
}

/// The same key sent 20 times at once, over two instances: one unit sold, and all 20
/// answers are 200 with the same order id (19 of them replayed), in every variant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_repeats_sell_one_unit_and_carry_one_order_id() {
    let _turn = seckill_testkit::heavy_turn().await;
    let cluster = service(2, &[]);
    let apis = cluster.apis();
    for (variant, shards) in variants() {
        let variant = variant.as_str();
        apis[0].reset("101", 50, shards).await;
        let mut orders = BTreeSet::new();
        let mut replays = 0;
        for (status, body, replayed) in Api::same_click(&apis, "101", variant, "click-1", 20).await
        {
            assert_eq!(status, 200, "{variant}: {body}");
            orders.insert(body["order"].as_str().unwrap_or_default().to_owned());
            replays += usize::from(replayed);
        }
        let stats = apis[1].stats("101").await;
        assert_eq!(orders.len(), 1, "{variant}: one order id: {orders:?}");
        assert_eq!(replays, 19, "{variant}: the first answer, then 19 replays");
        assert_eq!(int(&stats, "sold"), 1, "{variant}: {stats}");
        assert_eq!(int(&stats, "remaining"), 49, "{variant}: {stats}");
        let idempotency = &stats["idempotency"];
        assert_eq!(idempotency["keyed_sales"], 1, "{variant}: {stats}");
        assert_eq!(idempotency["replayed"], 19, "{variant}: {stats}");
        assert_eq!(idempotency["keys_sold_twice"], 0, "{variant}: {stats}");
    }
}

/// A key first used for one request and then with another — another buyer, another
/// variant, another knob — is a 422 that sells nothing; the first request still replays.
#[tokio::test]
async fn a_key_with_another_request_is_422_and_sells_nothing() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 10, 1).await;
    let (status, first, _) = api.deduct_keyed("101", "lua?user=ann", "k1").await;
    assert_eq!(status, 200, "{first}");
    for other in ["lua?user=bob", "watchdog?user=ann", "lua"] {
        let (status, body, _) = api.deduct_keyed("101", other, "k1").await;
        assert_eq!(status, 422, "{other}: {body}");
        assert_eq!(body["outcome"], "key_reused", "{other}: {body}");
    }
    let (status, again, replayed) = api.deduct_keyed("101", "lua?user=ann", "k1").await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again["order"], first["order"]);
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "sold"), 1, "{stats}");
}

/// The key lives in Redis: the instance that answered it dies, a new one starts, and the
/// repeat gets the first answer.
#[tokio::test]
async fn a_key_outlives_the_instance_that_answered_it() {
    let mut cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 10, 1).await;
    let (status, first, _) = api.deduct_keyed("101", "watchdog", "k-restart").await;
    assert_eq!(status, 200, "{first}");
    cluster.instances[0].kill();
    let fresh = instance(&cluster.redis.url(), &[]);
    let (status, again, replayed) = fresh
        .api()
        .deduct_keyed("101", "watchdog", "k-restart")
        .await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again["order"], first["order"]);
    assert_eq!(int(&fresh.api().stats("101").await, "sold"), 1);
}

/// An answer that stands (sold out) is replayed, until the product's next reset starts a
/// new sale; an answer worth retrying (the lock busy) frees the key for the retry.
#[tokio::test]
async fn a_standing_answer_is_kept_and_one_worth_retrying_frees_the_key() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 0, 1).await;
    let (status, _, _) = api.deduct_keyed("101", "lua", "late").await;
    assert_eq!(status, 409);
    let (status, _, replayed) = api.deduct_keyed("101", "lua", "late").await;
    assert_eq!((status, replayed), (409, true), "sold out stands");
    api.reset("101", 5, 1).await;
    let (status, body, replayed) = api.deduct_keyed("101", "lua", "late").await;
    assert_eq!((status, replayed), (200, false), "a new sale: {body}");

    // A setnx lock held by somebody else: 429, and the key is free again.
    let mut redis = cluster.redis.conn().await;
    let lock = keys("101").whole().lock.clone();
    let _: () = redis::cmd("SET")
        .arg(&lock)
        .arg("someone")
        .query_async(&mut redis)
        .await
        .unwrap();
    let (status, _, _) = api.deduct_keyed("101", "setnx", "busy").await;
    assert_eq!(status, 429);
    let _: () = redis::cmd("DEL")
        .arg(&lock)
        .query_async(&mut redis)
        .await
        .unwrap();
    let (status, body, replayed) = api.deduct_keyed("101", "setnx", "busy").await;
    assert_eq!((status, replayed), (200, false), "served anew: {body}");
    assert_eq!(int(&api.stats("101").await, "sold"), 2);
}

/// An instance SIGKILLed while it serves a keyed request leaves the key's claim pending;
/// a repeat waits for the claim's deadline (its work plus a margin), takes it over and
/// sells — once. (The dead holder's lock goes one lease after the kill, long before the
/// claim's deadline; a lease of 1 s, not 300 ms, leaves the repeat's own watchdog 667 ms
/// for a late renewal over its 3 s of work on a busy machine, not 200.)
#[tokio::test]
async fn a_claim_left_by_a_killed_instance_is_taken_over_after_its_deadline() {
    let mut cluster = service(2, &["--lock-lease-ms", "1000"]);
    let (dying, survivor) = (cluster.api(0), cluster.api(1));
    survivor.reset("101", 10, 1).await;
    let first = tokio::spawn(async move {
        dying
            .deduct_keyed("101", "watchdog?work_ms=3000", "k-killed")
            .await
    });
    // Killed inside its work (the audit's set names the holder), its claim taken.
    crate::someone_inside(&cluster.redis).await;
    cluster.instances[0].kill();
    assert!(
        first.await.is_err(),
        "the first request got no answer: its instance died"
    );
    let (status, body, replayed) = survivor
        .deduct_keyed("101", "watchdog?work_ms=3000", "k-killed")
        .await;
    assert_eq!(
        (status, replayed),
        (200, false),
        "taken over and sold: {body}"
    );
    let stats = survivor.stats("101").await;
    assert_eq!(int(&stats, "sold"), 1, "{stats}");
    let (status, again, replayed) = survivor
        .deduct_keyed("101", "watchdog?work_ms=3000", "k-killed")
        .await;
    assert_eq!((status, replayed), (200, true));
    assert_eq!(again["order"], body["order"]);
}

/// A split product's shards are not on the claim's slot, so a sale's answer reaches the
/// claim after the sale. An instance that died between the two leaves a pending claim and
/// a sale under the key in a shard: the repeat finds the sale and answers it, sells nothing.
#[tokio::test]
async fn a_split_sale_whose_answer_was_lost_is_found_in_its_shard() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 40, 4).await;
    let (status, first, _) = api.deduct_keyed("101", "segmented", "k-split").await;
    assert_eq!(status, 200, "{first}");
    // What a crash between the shard's sale and the claim's answer leaves: the claim
    // pending, its deadline passed.
    let mut redis = cluster.redis.conn().await;
    let claim = keys("101").whole().claim("k-split");
    let _: () = redis::cmd("HSET")
        .arg(&claim)
        .arg("state")
        .arg("pending")
        .arg("holder")
        .arg("dead/1")
        .arg("deadline")
        .arg(1)
        .query_async(&mut redis)
        .await
        .unwrap();
    let (status, again, replayed) = api.deduct_keyed("101", "segmented", "k-split").await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again["order"], first["order"]);
    assert_eq!(again["shard"], first["shard"]);
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "sold"), 1, "{stats}");
    assert_eq!(stats["idempotency"]["keys_sold_twice"], 0, "{stats}");
}

/// A reset lands while a keyed request works inside its lock: the claim it holds is of the
/// sale before. Its late commit is refused (the claim's epoch is not the sale's), so the
/// key's repeat — a fresh claim in the new sale — is its one sale there. Before, the late
/// commit sold under the old claim and the repeat, finding that claim stale, sold again.
#[tokio::test]
async fn a_keyed_request_that_outlives_a_reset_sells_once_in_the_new_sale() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    // A whole product, and one split in four (its claim's slot is not its shards').
    for (path, shards) in [("setnx?work_ms=1500", 1), ("segmented?work_ms=1500", 4)] {
        api.reset("101", 10, shards).await;
        let first = {
            let api = api.clone();
            tokio::spawn(async move { api.deduct_keyed("101", path, "k-reset").await })
        };
        crate::someone_inside(&cluster.redis).await;
        api.reset("101", 10, shards).await;
        let (status, body, _) = first.await.unwrap();
        eprintln!("{path}: the request that outlived the reset: {status} {body}");
        let (status, again, _) = api.deduct_keyed("101", path, "k-reset").await;
        assert_eq!(status, 200, "{path}: {again}");
        let stats = api.stats("101").await;
        assert_eq!(
            int(&stats, "sold"),
            1,
            "{path}: one sale under the key in the new sale: {stats}"
        );
        assert_eq!(
            stats["idempotency"]["keys_sold_twice"], 0,
            "{path}: {stats}"
        );
    }
}

/// With a lock store of its own (`--lock-redis-url`), where the commit cannot see the
/// lock, a request inside its critical section when the product is reset sells nothing in
/// the new sale: its entry read the sale's epoch, and the commit refuses another
/// (`503 lock_lost`). Unkeyed on a whole product (token), and keyed on a split one
/// (segmented), whose key's repeat is then its one sale. Before, only a keyed request on a
/// whole product was refused (by its claim's epoch): the others sold into the new sale.
#[tokio::test]
async fn a_request_that_outlives_a_reset_sells_nothing_in_the_new_sale_with_locks_apart() {
    let locks = seckill_testkit::RedisServer::start();
    let lock_url = locks.url();
    let cluster = service(1, &["--lock-redis-url", &lock_url]);
    let api = cluster.api(0);
    for (path, shards, key) in [
        ("token?work_ms=1500", 1, None),
        ("segmented?work_ms=1500", 4, Some("k-reset-apart")),
    ] {
        api.reset("101", 10, shards).await;
        let first = {
            let api = api.clone();
            tokio::spawn(async move {
                match key {
                    Some(key) => {
                        let (status, body, _) = api.deduct_keyed("101", path, key).await;
                        (status, body)
                    }
                    None => api.deduct("101", path).await,
                }
            })
        };
        crate::someone_inside(&cluster.redis).await;
        api.reset("101", 10, shards).await;
        let (status, body) = first.await.unwrap();
        assert_eq!(
            (status, body["outcome"].as_str()),
            (503, Some("lock_lost")),
            "{path}: the request that outlived the reset: {body}"
        );
        let stats = api.stats("101").await;
        assert_eq!(
            int(&stats, "sold"),
            0,
            "{path}: nothing sold in the new sale: {stats}"
        );
        if let Some(key) = key {
            let (status, again, _) = api.deduct_keyed("101", path, key).await;
            assert_eq!(status, 200, "{path}: {again}");
            let stats = api.stats("101").await;
            assert_eq!(int(&stats, "sold"), 1, "{path}: {stats}");
            assert_eq!(
                stats["idempotency"]["keys_sold_twice"], 0,
                "{path}: {stats}"
            );
        }
    }
}

/// A key used again once its claim expired (`--idempotency-ttl-s`) is a new request, on a
/// split product and a cart too: a new sale with its own order. Before, the shards' record
/// of the first sale under the key never expired: the split product's refused the reuse
/// (`423`, until the next reset), and the cart answered the first cart's order, selling
/// nothing.
#[tokio::test]
async fn a_key_used_again_after_its_claim_expired_is_a_new_request() {
    // Every bound small, so that the key's TTL may be 3 s (above twice a 1 s request).
    let cluster = service(
        1,
        &[
            "--idempotency-ttl-s",
            "3",
            "--request-timeout-ms",
            "1000",
            "--redis-timeout-ms",
            "100",
            "--redis-wait-timeout-ms",
            "50",
            "--max-work-ms",
            "100",
            "--max-wait-ms",
            "100",
            "--max-pause-ms",
            "100",
        ],
    );
    let api = cluster.api(0);
    // Split, in one shard: the sale is on the shard the first sold on.
    api.reset("101", 10, 1).await;
    for product in ["102", "103"] {
        api.reset(product, 10, 1).await;
    }
    let mut redis = cluster.redis.conn().await;
    for (product, path, key) in [
        ("101", "segmented?user=u1", "k-again-split"),
        (
            "102",
            "multi?products=102,103&user=u1&wait_ms=100",
            "k-again-cart",
        ),
    ] {
        let (status, first, _) = api.deduct_keyed(product, path, key).await;
        assert_eq!(status, 200, "{path}: {first}");
        // The claim gone with its TTL (looked at, not waited for by the clock).
        let claim = keys(product).whole().claim(key);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let held: bool = redis::AsyncCommands::exists(&mut redis, &claim)
                .await
                .unwrap();
            if !held {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{key}: the claim never expired"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let (status, again, replayed) = api.deduct_keyed(product, path, key).await;
        assert_eq!((status, replayed), (200, false), "{path}: {again}");
        assert_ne!(
            again["order"], first["order"],
            "{path}: a new sale: {again}"
        );
    }
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "sold"), 2, "{stats}");
    for product in ["102", "103"] {
        let stats = api.stats(product).await;
        assert_eq!(int(&stats, "sold"), 2, "{product}: {stats}");
    }
}

/// A client that hangs up once its key is claimed: the request goes on to its answer (it
/// runs on a task of its own from the claim on), so the key's repeat gets that answer —
/// before, a variant that is not spawned (naive, lua) dropped the request there, leaving
/// the claim pending until its deadline, and the repeat waited it out and sold afresh.
#[tokio::test]
async fn a_keyed_request_whose_client_hangs_up_still_answers_its_key() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 10, 1).await;
    let path = "naive?work_ms=1000";
    let first = {
        let api = api.clone();
        tokio::spawn(async move { api.deduct_keyed("101", path, "k-hang").await })
    };
    // Once the claim is there, the client hangs up (its connection closed).
    let claim = keys("101").whole().claim("k-hang");
    let mut redis = cluster.redis.conn().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let state: Option<String> = redis::cmd("HGET")
            .arg(&claim)
            .arg("state")
            .query_async(&mut redis)
            .await
            .unwrap();
        if state.is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the key was never claimed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    first.abort();
    let (status, again, replayed) = api.deduct_keyed("101", path, "k-hang").await;
    assert_eq!(
        (status, replayed),
        (200, true),
        "the first request's answer, given again: {again}"
    );
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "sold"), 1, "{stats}");
}

/// A client that hangs up while its key's claim is on its way to Redis (here held there by
/// `CLIENT PAUSE WRITE`, the claim seen blocked): once the instance has dropped the
/// connection, Redis goes on and the claim is made — and the request still runs to its
/// answer, which the key's repeat (sent once the claim is there) gets. Before, the claim ran on the request's own task:
/// dropped with it, it left the claim pending with nobody to answer it, and the repeat
/// waited out its deadline and sold afresh, or was answered 423.
#[tokio::test]
async fn a_client_that_hangs_up_during_its_claim_still_gets_its_key_answered() {
    // The claim held in Redis well inside the instance's bound on a command: its answer
    // comes, only to a request that is gone.
    let cluster = service(
        1,
        &[
            "--redis-timeout-ms",
            "5000",
            "--request-timeout-ms",
            "60000",
        ],
    );
    let api = cluster.api(0);
    api.reset("101", 10, 1).await;
    let path = "naive";
    // Every script of a keyed sale loaded: the claim is then one `EVALSHA`.
    let (status, warm, _) = api.deduct_keyed("101", path, "k-warm").await;
    assert_eq!(status, 200, "{warm}");
    let mut redis = cluster.redis.conn().await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(30_000)
        .arg("WRITE")
        .query_async(&mut redis)
        .await
        .unwrap();
    // A client of its own, whose one connection goes when it hangs up.
    let first = {
        let api = Api::new(&cluster.instances[0].url(""));
        tokio::spawn(async move { api.deduct_keyed("101", path, "k-hang-claim").await })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !blocked_script(&mut redis).await {
        assert!(
            std::time::Instant::now() < deadline,
            "the claim never reached Redis"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    first.abort();
    // The instance saw the client go (its side of the connection closed): the request's
    // own task is dropped by now.
    let port = cluster.instances[0].addr.port();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while half_closed(port) {
        assert!(
            std::time::Instant::now() < deadline,
            "the instance kept the connection"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut redis)
        .await
        .unwrap();
    // The claim made (a repeat sent before it might claim the key first, and serve it).
    let claim = keys("101").whole().claim("k-hang-claim");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let holder: Option<String> = redis::cmd("HGET")
            .arg(&claim)
            .arg("holder")
            .query_async(&mut redis)
            .await
            .unwrap();
        if holder.is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the key was never claimed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let (status, again, replayed) = api.deduct_keyed("101", path, "k-hang-claim").await;
    assert_eq!(
        (status, replayed),
        (200, true),
        "the first request's answer, given again: {again}"
    );
    let stats = api.stats("101").await;
    assert_eq!(
        int(&stats, "sold"),
        2,
        "the warm-up's unit and this key's: {stats}"
    );
}

/// Whether a script call is held by `CLIENT PAUSE` (a client blocked in `evalsha`).
async fn blocked_script(redis: &mut redis::aio::MultiplexedConnection) -> bool {
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(redis)
        .await
        .unwrap();
    clients.lines().any(|client| {
        let fields: Vec<&str> = client.split_whitespace().collect();
        fields.contains(&"cmd=evalsha") && fields.contains(&"flags=b")
    })
}

/// Whether a connection to the instance on `port` is closed by its client and not yet by
/// the instance (`CLOSE-WAIT`).
fn half_closed(port: u16) -> bool {
    let out = std::process::Command::new("ss")
        .args([
            "-Htn",
            "state",
            "close-wait",
            &format!("( sport = :{port} )"),
        ])
        .output()
        .expect("ss (iproute2, which scripts/install-deps.sh installs)");
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}
