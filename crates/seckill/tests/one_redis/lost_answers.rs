//! A lost answer is not an undone command: a sale whose answer never came is looked up
//! before anything is given back, and a paused Redis that runs the sale late finds the
//! request's claim, reservation and lock as the sale would have them.
//!
//! The first tests run the scripts by hand, on a connection with no response timeout, so
//! that a command sent to a frozen Redis simply waits; the others go through an instance
//! whose Redis is frozen (SIGSTOP) or killed while a sale is on its way.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::future::join_all;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use seckill::scripts::{self, Refusal, Reply};
use seckill_lock::watchdog::ReleaseArgs;
use seckill_testkit::{RedisServer, int};

use crate::{instance, keys};

/// A connection that waits as long as it takes for each answer.
async fn patient(redis: &RedisServer) -> MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// A watchdog holder's sale of one unit (order `order`), as `commit_release.lua` takes it.
fn sale<'a>(
    shard: &'a seckill::keys::ShardKeys,
    holder: &'a str,
    order: &'a str,
) -> scripts::Sale<'a> {
    scripts::Sale {
        shard,
        holder,
        order,
        instance: "test",
        variant: "watchdog",
        user: "",
        keyed: None,
        split: false,
        trace: String::new(),
    }
}

fn release(holder: &str, lease: Duration) -> ReleaseArgs {
    ReleaseArgs {
        holder: holder.to_owned(),
        lease,
        fair: false,
        successor: None,
    }
}

/// `resolve.lua` after a sale that ran finds it; before one, it voids the order id, and the
/// sale, arriving after, sells nothing (-8) — the stock and the orders are as if it never
/// was sent.
#[tokio::test]
async fn a_sale_looked_up_is_found_or_voided_and_a_voided_one_never_runs() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let shard = keys("101").whole();
    let _: () = conn.set(&shard.stock, 10).await.unwrap();
    let lease = Duration::from_secs(30);
    let enter = |holder: &str| scripts::lock_enter(&shard, holder, lease, false, lease, "");

    let _: (i64, i64, i64, i64) = enter("x").invoke_async(&mut conn).await.unwrap();
    let sold: (Reply, bool) =
        scripts::commit_release(&sale(&shard, "x", "o-1"), true, &release("x", lease), "")
            .invoke_async(&mut conn)
            .await
            .unwrap();
    assert_eq!(sold, (Reply::Units(9), true), "x sold and released");
    let found: (i64, i64) = scripts::resolve(&shard, "x", "o-1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        found,
        (1, 9),
        "the sale that ran is found, with the units left"
    );

    let _: (i64, i64, i64, i64) = enter("y").invoke_async(&mut conn).await.unwrap();
    let voided: (i64, i64) = scripts::resolve(&shard, "y", "o-2")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(voided, (0, 9), "not run yet: voided");
    let late: (Reply, bool) =
        scripts::commit_release(&sale(&shard, "y", "o-2"), true, &release("y", lease), "")
            .invoke_async(&mut conn)
            .await
            .unwrap();
    assert_eq!(
        late.0,
        Reply::Refused(Refusal::Voided),
        "the voided sale, arriving late, sells nothing"
    );
    let stock: i64 = conn.get(&shard.stock).await.unwrap();
    let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
    assert_eq!((stock, orders), (9, 1));

    // A sale sent twice (a client library after a dropped connection) sells once.
    let _: (i64, i64, i64, i64) = enter("z").invoke_async(&mut conn).await.unwrap();
    let commit =
        || scripts::commit_release(&sale(&shard, "z", "o-3"), true, &release("z", lease), "");
    let once: (Reply, bool) = commit().invoke_async(&mut conn).await.unwrap();
    let twice: (Reply, bool) = commit().invoke_async(&mut conn).await.unwrap();
    assert_eq!(
        (once.0, twice.0),
        (Reply::Units(8), Reply::Units(8)),
        "the same order id, sold once"
    );
    let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
    assert_eq!(orders, 2);
}

/// A commit sent just as Redis froze reaches it only once the holder's lease has run out
/// (frozen for twice the lease): the commit's own check of the lock finds it gone, and it
/// sells nothing. No renewal can run in a frozen Redis, so a commit checked against its
/// lock never runs more than a lease after it was sent (`lib/critical.lua`'s `sell` checks
/// the lock for `commit.lua` as for `commit_release.lua`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_reaches_a_paused_redis_after_its_lease_ran_out_sells_nothing() {
    let redis = RedisServer::start();
    let mut conn = patient(&redis).await;
    let shard = keys("101").whole();
    let _: () = conn.set(&shard.stock, 10).await.unwrap();
    let lease = Duration::from_millis(500);
    let taken: (i64, i64, i64, i64) = scripts::lock_enter(&shard, "x", lease, false, lease, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(taken.0, 1, "x holds the lock");
    redis.signal("STOP");
    let commit = {
        let (mut late, shard) = (conn.clone(), shard.clone());
        tokio::spawn(async move {
            let sold: (Reply, bool) =
                scripts::commit_release(&sale(&shard, "x", "o-x"), true, &release("x", lease), "")
                    .invoke_async(&mut late)
                    .await
                    .unwrap();
            sold
        })
    };
    tokio::time::sleep(lease * 2).await;
    redis.signal("CONT");
    assert_eq!(
        commit.await.unwrap(),
        (Reply::Refused(Refusal::LockLost), false),
        "the lock was lost: nothing sold"
    );
    let stock: i64 = conn.get(&shard.stock).await.unwrap();
    let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
    let lost: i64 = conn.hget(&shard.audit, "lock_lost").await.unwrap();
    assert_eq!((stock, orders, lost), (10, 0, 1));
}

/// A repeat that takes over a split product's key fences each shard: a sale of the old
/// request that ran before is found; one that arrives after is refused (-7), whatever the
/// clocks say.
#[tokio::test]
async fn a_shard_fenced_by_a_repeat_refuses_the_old_requests_late_sale() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let product = keys("101");
    let layout = seckill::keys::Layout::plain(&product.product, 2);
    let (first, second) = (product.shard(&layout, 0), product.shard(&layout, 1));
    for shard in [&first, &second] {
        let _: () = conn.set(&shard.stock, 10).await.unwrap();
    }
    let lease = Duration::from_secs(30);
    let keyed = |shard, holder, order| {
        let mut sale = sale(shard, holder, order);
        sale.keyed = Some("k-1");
        sale.split = true;
        sale
    };
    let (first, second) = (&first, &second);
    // The old request ("old") sold on the first shard; its answer was lost.
    let _: (i64, i64, i64, i64) = scripts::lock_enter(first, "old", lease, false, lease, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let _: (Reply, bool) = scripts::commit_release(
        &keyed(first, "old", "o-old"),
        true,
        &release("old", lease),
        "",
    )
    .invoke_async(&mut conn)
    .await
    .unwrap();
    let ttl = Duration::from_secs(60);
    let found: Option<String> = scripts::idem_fence(first, "k-1", "new", ttl)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        found.as_deref(),
        Some("o-old"),
        "the old request's sale, found"
    );
    let fenced: Option<String> = scripts::idem_fence(second, "k-1", "new", ttl)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(fenced, None);
    // A second sale of the old request, late, on the fenced shard: refused.
    let _: (i64, i64, i64, i64) = scripts::lock_enter(second, "old", lease, false, lease, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let late: (Reply, bool) = scripts::commit_release(
        &keyed(second, "old", "o-late"),
        true,
        &release("old", lease),
        "",
    )
    .invoke_async(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        late.0,
        Reply::Refused(Refusal::TakenOver),
        "fenced: the old request sells nothing more under the key"
    );
    // The new holder may sell there (it would, had nothing been found).
    let _: (i64, i64, i64, i64) = scripts::lock_enter(second, "new", lease, false, lease, "")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let new: (Reply, bool) = scripts::commit_release(
        &keyed(second, "new", "o-new"),
        true,
        &release("new", lease),
        "",
    )
    .invoke_async(&mut conn)
    .await
    .unwrap();
    assert_eq!(new.0, Reply::Units(9));
}

/// The double sale, aimed at: a keyed click on a split product with one unit per
/// buyer, whose commit is sent to a frozen Redis. The request answers 504 `unknown` with its
/// order id (not a 503 that invites a blind retry, and nothing given back). When Redis goes
/// on, the same key answers one sale: the late one, found (replayed), or — when the repeat
/// fenced the shards before the late sale reached its shard — a sale of its own, the late
/// one refused. Either way one unit is sold, the buyer holds one, and a new click of theirs
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_split_sale_sent_to_a_paused_redis_is_answered_once() {
    let redis = RedisServer::start();
    let args = [
        "--redis-timeout-ms",
        "300",
        "--redis-wait-timeout-ms",
        "100",
    ];
    let seckill = instance(&redis.url(), &args);
    let api = seckill.api();
    api.reset_limited("101", 10, 4, 1).await;
    let path = "segmented?work_ms=600&user=ann";
    let clicked = {
        let api = api.clone();
        tokio::spawn(async move { api.deduct_keyed("101", path, "k-1").await })
    };
    // Into the work (the audit's set names the holder): the commit is sent to a Redis
    // that is frozen.
    crate::someone_inside(&redis).await;
    redis.signal("STOP");
    let (status, first, _) = clicked.await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.signal("CONT");
    assert_eq!(status, 504, "{first}");
    assert_eq!(first["outcome"], "unknown", "{first}");
    let lost = first["order"]
        .as_str()
        .expect("the order id to look up")
        .to_owned();

    let (status, again, replayed) = api.deduct_keyed("101", path, "k-1").await;
    assert_eq!(status, 200, "{again}");
    let orders = crate::recorded_orders(&redis, "101").await;
    eprintln!(
        "the lost sale {lost}: repeat answered {again} (replayed: {replayed}); orders {orders:?}"
    );
    assert_eq!(orders.len(), 1, "one unit sold: {orders:?}");
    assert!(
        orders.contains_key(again["order"].as_str().unwrap()),
        "{again}"
    );
    if replayed {
        assert_eq!(
            again["order"],
            lost.as_str(),
            "the replay is the late sale's"
        );
    } else {
        assert!(!orders.contains_key(&lost), "the late sale was fenced out");
    }
    let (status, more) = api.deduct("101", "segmented?user=ann").await;
    assert_eq!(status, 403, "ann has her one unit: {more}");
    let stats = api.stats("101").await;
    assert_eq!(int(&stats["over_limit"], "units"), 0, "{stats}");
    assert_eq!(int(&stats["idempotency"], "keys_sold_twice"), 0, "{stats}");
    assert_eq!(int(&stats, "reserved_unsold"), 0, "{stats}");
}

/// The other half: the commit never runs (Redis, frozen with it unread, is killed and
/// restarted from its AOF). The request answers 504; once Redis is back the sale is looked
/// up, found never to have run, and voided, and only then is the buyer's reservation given
/// back: the buyer can buy, and does, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_sale_that_never_ran_gives_the_reservation_back_once_it_is_known() {
    let mut redis = RedisServer::start();
    let args = [
        "--redis-timeout-ms",
        "300",
        "--redis-wait-timeout-ms",
        "100",
    ];
    let seckill = instance(&redis.url(), &args);
    let api = seckill.api();
    api.reset_limited("101", 10, 4, 1).await;
    let clicked = {
        let api = api.clone();
        tokio::spawn(async move { api.deduct("101", "segmented?work_ms=600&user=ann").await })
    };
    crate::someone_inside(&redis).await;
    redis.signal("STOP");
    let (status, first) = clicked.await.unwrap();
    assert_eq!(status, 504, "{first}");
    tokio::task::block_in_place(|| redis.restart());
    // The look-up runs again until Redis answers; then the reservation goes back.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let stats = api.stats("101").await;
        if int(&stats, "reserved_unsold") == 0 {
            assert_eq!(int(&stats, "sold"), 0, "{stats}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reservation stayed: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, bought) = api.deduct("101", "segmented?user=ann").await;
    assert_eq!(status, 200, "{bought}");
    let (status, _) = api.deduct("101", "segmented?user=ann").await;
    assert_eq!(status, 403, "one unit, not two");
}

/// A cart (`multi`) whose earlier try sold its first line under the key and lost its
/// answer before the second: the repeat completes the cart. The line already sold is kept
/// — its order is the cart's answer — the other is sold, and no line is bought twice. The
/// products limit each buyer to one: the unit the buyer holds of the first is this cart's,
/// not a limit reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_cart_sold_in_part_is_completed_by_its_repeat_never_twice() {
    let redis = RedisServer::start();
    let seckill = instance(&redis.url(), &[]);
    let api = seckill.api();
    api.reset_limited("312", 10, 1, 1).await;
    api.reset_limited("313", 10, 1, 1).await;
    // The earlier try's first line, as commit.lua leaves it: the unit, the order, the
    // buyer's count, the key.
    let first = keys("312").whole();
    let mut conn = redis.conn().await;
    let _: () = redis::pipe()
        .decr(&first.stock, 1)
        .hset(&first.orders, "o-earlier", "elsewhere multi ann")
        .hincr(&first.buyers, "ann", 1)
        .hset(&first.keys, "k-cart", "o-earlier")
        .query_async(&mut conn)
        .await
        .unwrap();
    let path = "multi?products=312,313&user=ann";
    let (status, body, replayed) = api.deduct_keyed("312", path, "k-cart").await;
    assert_eq!((status, replayed), (200, false), "{body}");
    assert_eq!(
        body["order"], "o-earlier",
        "the cart's answer is its first line's order"
    );
    let (status, again, replayed) = api.deduct_keyed("312", path, "k-cart").await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again["order"], "o-earlier");
    for product in ["312", "313"] {
        let stats = api.stats(product).await;
        assert_eq!(
            int(&stats, "remaining"),
            9,
            "one unit of {product}: {stats}"
        );
    }
}

/// A lua line that fails after it sold — here on its stream entry, the stream key written
/// by hand as a string on a streamed sale — is looked up as a lost answer is: the unit it
/// took is answered sold, with its order, in a call of its own and in the shared one. A
/// line that fails before it writes (a stock that is not a whole number) sold nothing: its
/// order id is voided by the look-up, and the error is the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lua_line_that_fails_after_it_sold_is_answered_sold_not_refused() {
    let redis = RedisServer::start();
    let seckill = instance(&redis.url(), &[]);
    let api = seckill.api();
    api.reset("314", 110, 1).await;
    let shard = keys("314").whole();
    let mut conn = redis.conn().await;
    let _: () = redis::pipe()
        .hset(&shard.audit, "streamed", 1)
        .set(&shard.stream, "not a stream")
        .query_async(&mut conn)
        .await
        .unwrap();
    for (batch, left) in [("off", 109), ("on", 108)] {
        let (status, body) = api.deduct("314", &format!("lua?batch={batch}")).await;
        assert_eq!(status, 200, "batch={batch}: the unit taken is sold: {body}");
        assert_eq!(int(&body, "remaining"), left, "batch={batch}: {body}");
        let order = body["order"].as_str().expect("the sale's order id");
        let recorded: bool = conn.hexists(&shard.orders, order).await.unwrap();
        assert!(
            recorded,
            "batch={batch}: the order answered is the one recorded"
        );
    }
    let stock: i64 = conn.get(&shard.stock).await.unwrap();
    let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
    assert_eq!((stock, orders), (108, 2), "two units, two orders");

    // Together, most of them wait for the shared call: lines of several, each answered
    // from its own look-up.
    let before = crate::script_calls(&redis).await;
    let answers = join_all((0..100).map(|_| api.deduct("314", "lua"))).await;
    let calls = crate::script_calls(&redis).await - before;
    let unsold: Vec<&(u16, serde_json::Value)> = answers
        .iter()
        .filter(|(status, _)| *status != 200)
        .collect();
    assert!(unsold.is_empty(), "every unit taken is sold: {unsold:?}");
    let recorded: Vec<String> = conn.hkeys(&shard.orders).await.unwrap();
    let answered: BTreeSet<&str> = answers
        .iter()
        .filter_map(|(_, body)| body["order"].as_str())
        .collect();
    assert_eq!(answered.len(), 100, "each answered its own order");
    assert!(
        answered
            .iter()
            .all(|order| recorded.iter().any(|r| r == order)),
        "each order answered is recorded"
    );
    assert!(
        calls < 200,
        "deductions shared calls: {calls} script calls, the look-ups' 100 among them"
    );
    let stock: i64 = conn.get(&shard.stock).await.unwrap();
    let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
    assert_eq!((stock, orders), (8, 102), "102 units, 102 orders");

    api.reset("315", 10, 1).await;
    let shard = keys("315").whole();
    let _: () = conn.set(&shard.stock, "2.5").await.unwrap();
    let (status, body) = api.deduct("315", "lua?batch=off").await;
    assert_eq!(status, 500, "a line that failed before it sold: {body}");
    let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
    let voided: i64 = conn.hlen(&shard.void).await.unwrap();
    assert_eq!(
        (orders, voided),
        (0, 1),
        "nothing sold, and its order id voided by the look-up"
    );
}

/// A lua line that runs on a replica — a master demoted under the instance, as behind
/// sentinels — is refused `READONLY` at its first write: nothing of the call can have run
/// there, so the sale is answered `503` at once, safe to retry, and not looked up (the
/// look-up could not void the id on a replica either, and would answer `504 unknown`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lua_line_refused_readonly_on_a_replica_is_answered_503() {
    let master = RedisServer::start();
    let shard = keys("316").whole();
    let mut conn = master.conn().await;
    let terms = [("epoch", "1"), ("per_user", "0")];
    let _: () = conn.hset_multiple(&shard.audit, &terms).await.unwrap();
    let _: () = conn.set(&shard.stock, 10).await.unwrap();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let mut on_replica = replica.conn().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let stock: Option<i64> = on_replica.get(&shard.stock).await.unwrap();
        if stock == Some(10) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never synced"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seckill = instance(&replica.url(), &[]);
    for path in ["lua?batch=off", "lua"] {
        let (status, body) = seckill.api().deduct("316", path).await;
        assert_eq!(status, 503, "{path}: {body}");
        assert_eq!(body["outcome"], "redis_unavailable", "{path}: {body}");
    }
    let stock: i64 = conn.get(&shard.stock).await.unwrap();
    let voided: i64 = conn.hlen(&shard.void).await.unwrap();
    assert_eq!((stock, voided), (10, 0), "nothing sold, nothing looked up");
}

/// Redis frozen under a burst of lua deductions: the call in flight times out and its sale
/// is unknown (504, looked up later), and what queued behind it is answered `503`, never
/// sent: the connection is known broken by then, and the next call fails before it leaves
/// the instance. Nothing answered 503 sells: once Redis runs again, every unknown sale is
/// found sold or voided, once, and the orders are theirs alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_deductions_queued_behind_a_frozen_redis_are_answered_503_unsent() {
    let redis = RedisServer::start();
    // A timeout long enough that the burst has queued behind the first call on any
    // machine; the verdict is in what the answers were, not in when they came.
    let seckill = instance(&redis.url(), &["--redis-timeout-ms", "1500"]);
    let api = seckill.api();
    api.reset("317", 1_000, 1).await;
    redis.signal("STOP");
    let answers = join_all((0..200).map(|_| api.deduct("317", "lua"))).await;
    redis.signal("CONT");
    let count = |wanted: u16| answers.iter().filter(|(s, _)| *s == wanted).count();
    let (unsent, unknown) = (count(503), count(504));
    let others: Vec<_> = answers
        .iter()
        .filter(|(s, _)| ![503, 504].contains(s))
        .collect();
    assert!(others.is_empty(), "{others:?}");
    assert!(
        unsent > 0,
        "the queue behind the frozen call was sent, a call at a time: {unknown} unknown"
    );
    let other = answers
        .iter()
        .find(|(s, body)| *s == 503 && body["outcome"] != "redis_unavailable");
    assert!(other.is_none(), "{other:?}");
    // Each unknown sale is looked up until Redis answers, and found sold or voided: once
    // all are, the orders and the voided ids are theirs, and none is a 503's.
    let shard = keys("317").whole();
    let mut conn = redis.conn().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (sold, voided) = loop {
        let sold: usize = conn.hlen(&shard.orders).await.unwrap();
        let voided: usize = conn.hlen(&shard.void).await.unwrap();
        if sold + voided >= unknown {
            break (sold, voided);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{sold} sold and {voided} voided of {unknown} unknown"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        sold + voided,
        unknown,
        "every sale resolved once, each a 504's: {sold} sold, {voided} voided"
    );
    let stats = api.stats("317").await;
    assert_eq!(int(&stats, "sold") as usize, sold, "{stats}");
    seckill_testkit::assert_exact(&stats, 1_000, "after the frozen burst");
}
