//! Every answer true when a master fails over: on a real Cluster of three masters with a
//! replica each, a `200` only from a sale a replica has, and a "nothing sold" only when
//! nothing can have sold. Each fault is aimed by an event read back from Redis (a holder
//! inside its critical section, a sale blocked in `WAIT`), never by a sleep.

use std::time::{Duration, Instant};

use seckill_testkit::partial::{PATIENT_WAIT, blocked_in_wait};
use seckill_testkit::{Api, Instance, Postgres, RedisCluster, heavy_turn, int};
use serde_json::Value;

use crate::{instance, keys, recorded_orders};

/// One instance in cluster mode on `redis`, with `extra` flags.
fn on_cluster(redis: &RedisCluster, extra: &[&str]) -> Instance {
    let mut args = vec!["--redis-mode", "cluster"];
    args.extend_from_slice(extra);
    instance(&redis.urls(), &args)
}

/// The port of the master serving `key`'s slot now.
fn master_of_key(redis: &RedisCluster, key: &str) -> u16 {
    let live = redis
        .nodes
        .iter()
        .find(|n| n.is_running())
        .expect("a live node");
    let slot: u16 = redis
        .cli(live.port, &["cluster", "keyslot", key])
        .trim()
        .parse()
        .expect("a slot");
    redis.master_port_of_slot(slot).expect("a master")
}

/// The master of a whole product's slot.
fn master_of(redis: &RedisCluster, product: &str) -> u16 {
    master_of_key(redis, &keys(product).whole().stock)
}

/// A product from 102 on whose slot another master serves than `product`'s.
fn on_another_master(redis: &RedisCluster, product: &str) -> String {
    let master = master_of(redis, product);
    (102..300)
        .map(|p| p.to_string())
        .find(|p| master_of(redis, p) != master)
        .expect("a product on another master")
}

/// Waits until `redis`'s sorted set `inside` of every one of `products` has a holder.
async fn inside_all(redis: &RedisCluster, products: &[&str]) {
    let mut conn = redis.conn().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut all = true;
        for product in products {
            let inside: u64 = redis::cmd("ZCARD")
                .arg(&keys(product).whole().inside)
                .query_async(&mut conn)
                .await
                .expect("ZCARD");
            all &= inside > 0;
        }
        if all {
            return;
        }
        assert!(Instant::now() < deadline, "nobody got inside {products:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Until the answer to a keyed repeat of `path` for `product` is a 200: the last answer.
async fn until_200(api: &Api, product: &str, path: &str, key: &str) -> (u16, Value, bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = api.deduct_keyed(product, path, key).await;
        if answer.0 == 200 || Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A cart whose first line sold on one master before the next line's master was killed
/// is not answered as if nothing sold: its answer names the order the buyer holds. Before,
/// the cart was answered `503 redis_unavailable` (or `lock_lost`, "nothing was sold,
/// retrying is safe") while the first line's unit stayed sold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cart_that_sold_a_line_before_a_master_died_says_so() {
    let _turn = heavy_turn().await;
    let mut redis = RedisCluster::start(3, 1);
    let seckill = on_cluster(&redis, &[]);
    let api = seckill.api();
    let other = on_another_master(&redis, "101");
    for product in ["101", other.as_str()] {
        api.reset(product, 10, 1).await;
    }
    // A cart sold first, so that every script is loaded on every master before one dies.
    let (status, body) = api
        .deduct("101", &format!("multi?products=101,{other}"))
        .await;
    assert_eq!(status, 200, "{body}");
    let path = format!("multi?products=101,{other}&work_ms=1500&user=u1");
    let cart = {
        let (api, path) = (api.clone(), path.clone());
        tokio::spawn(async move { api.deduct("101", &path).await })
    };
    // Every line entered (its stock read under its lock): then the second line's master
    // dies while the holder works.
    inside_all(&redis, &["101", &other]).await;
    redis.kill(master_of(&redis, &other));
    let (status, body) = cart.await.expect("the cart's answer");
    tokio::task::block_in_place(|| redis.wait_for_failover(Duration::from_secs(30)));

    let held = recorded_orders(&mut redis.conn().await, "101").await;
    eprintln!("the cart: {status} {body}; 101's orders: {held:?}");
    assert_eq!(held.len(), 2, "the first line sold before the master died");
    let order = held
        .iter()
        .find(|(_, sold)| sold.contains("u1"))
        .map(|(order, _)| order)
        .expect("u1's order");
    assert_ne!(status, 200, "the second line did not sell: {body}");
    assert_eq!(
        body["outcome"], "partly_sold",
        "an answer that names what sold: {body}"
    );
    let named: Vec<&str> = body["orders"]
        .as_array()
        .map(|orders| orders.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(named, [order.as_str()], "the order the buyer holds: {body}");
}

/// While a keyed sale waits for its replica (blocked in `WAIT`, the replica frozen), a
/// repeat of its key is not answered `200`: no replica has the sale yet. Once the replica
/// goes on, the repeat is answered `200` with the sale's order. Before, the sale's script
/// wrote the key's answer `200` before the confirmation, and the repeat replayed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_is_not_answered_200_before_a_replica_has_the_sale() {
    let _turn = heavy_turn().await;
    let redis = RedisCluster::start(3, 1);
    let seckill = on_cluster(&redis, &PATIENT_WAIT);
    let api = seckill.api();
    api.reset("101", 10, 1).await;
    let master = master_of(&redis, "101");
    let replica = redis.replica_of(master);
    let master_url = format!("redis://127.0.0.1:{master}");
    redis.signal(replica, "STOP");
    let path = "lua?batch=off&user=u1";
    let before = blocked_in_wait(&master_url).await;
    let first = {
        let api = api.clone();
        tokio::spawn(async move { api.deduct_keyed("101", path, "k-wait").await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while blocked_in_wait(&master_url).await.is_subset(&before) {
        assert!(Instant::now() < deadline, "the sale never blocked in WAIT");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, repeat, replayed) = api.deduct_keyed("101", path, "k-wait").await;
    redis.signal(replica, "CONT");
    let (first_status, first_body, _) = first.await.expect("the first answer");
    eprintln!("the repeat while the sale waited: {status} {repeat} (replayed {replayed})");
    eprintln!("the first, once the replica went on: {first_status} {first_body}");
    assert_ne!(
        status, 200,
        "a repeat answered while no replica had the sale: {repeat}"
    );
    let (status, again, _) = until_200(&api, "101", path, "k-wait").await;
    assert_eq!(status, 200, "once the replica has it: {again}");
    assert_eq!(
        again["order"], first_body["order"],
        "the same sale: {again}"
    );
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "sold"), 1, "{stats}");
}

/// A repeat that takes a key over from a request that died after its sale (a split
/// product's, whose claim gets its answer after the sale) and finds that sale is not
/// answered `200` before a replica has it: the sale found is asked of the replicas as any
/// recorded answer is, and answered `503 unconfirmed` while they are frozen, `200` with
/// the same order once they go on. Before, the take-over's find was answered `200` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_that_finds_the_sale_waits_for_a_replica_to_have_it() {
    let _turn = heavy_turn().await;
    let redis = RedisCluster::start(3, 1);
    let mut first = on_cluster(&redis, &PATIENT_WAIT);
    let second = on_cluster(
        &redis,
        &[
            "--redis-wait-replicas",
            "1",
            "--redis-wait-timeout-ms",
            "300",
        ],
    );
    second.api().reset("101", 10, 3).await;
    let masters = redis.master_ports();
    let urls: Vec<String> = masters
        .iter()
        .map(|port| format!("redis://127.0.0.1:{port}"))
        .collect();
    let replicas: Vec<u16> = masters.iter().map(|&m| redis.replica_of(m)).collect();
    for &replica in &replicas {
        redis.signal(replica, "STOP");
    }
    let path = "segmented?user=u1";
    let sale = {
        let api = first.api();
        tokio::spawn(async move { api.deduct_keyed("101", path, "k-took").await })
    };
    // The sale made, and its confirmation waiting: then its instance dies.
    let deadline = Instant::now() + Duration::from_secs(10);
    'waiting: loop {
        for url in &urls {
            if !blocked_in_wait(url).await.is_empty() {
                break 'waiting;
            }
        }
        assert!(Instant::now() < deadline, "the sale never blocked in WAIT");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.kill();
    let _ = sale.await;
    let (status, repeat, _) = second.api().deduct_keyed("101", path, "k-took").await;
    for &replica in &replicas {
        redis.signal(replica, "CONT");
    }
    eprintln!("the repeat that took the key over: {status} {repeat}");
    assert_ne!(
        status, 200,
        "a take-over's find answered before a replica had it: {repeat}"
    );
    let (status, again, _) = until_200(&second.api(), "101", path, "k-took").await;
    assert_eq!(status, 200, "once the replicas have it: {again}");
    let stats = second.api().stats("101").await;
    assert_eq!(int(&stats, "sold"), 1, "one sale under the key: {stats}");
    if repeat["order"].is_string() {
        assert_eq!(again["order"], repeat["order"], "the sale found: {again}");
    }
}

/// A cart is answered `200` only once a replica has every line: with the replica of one
/// line's master frozen, the cart is answered `503 unconfirmed`, and its key's repeat
/// `200` with the same orders once the replica goes on. Before, a cart was answered `200`
/// without asking any replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cart_is_answered_200_only_once_replicas_have_every_line() {
    let _turn = heavy_turn().await;
    let redis = RedisCluster::start(3, 1);
    let seckill = on_cluster(
        &redis,
        &[
            "--redis-wait-replicas",
            "1",
            "--redis-wait-timeout-ms",
            "300",
        ],
    );
    let api = seckill.api();
    let other = on_another_master(&redis, "101");
    for product in ["101", other.as_str()] {
        api.reset(product, 10, 1).await;
    }
    let replica = redis.replica_of(master_of(&redis, &other));
    redis.signal(replica, "STOP");
    let path = format!("multi?products=101,{other}&user=u1");
    let (status, body, _) = api.deduct_keyed("101", &path, "k-cart").await;
    redis.signal(replica, "CONT");
    eprintln!("the cart, a line's replica frozen: {status} {body}");
    assert_eq!(
        (status, body["outcome"].as_str()),
        (503, Some("unconfirmed")),
        "{body}"
    );
    let (status, again, _) = until_200(&api, "101", &path, "k-cart").await;
    assert_eq!(status, 200, "once the replica has it: {again}");
    assert_eq!(again["order"], body["order"], "the same cart: {again}");
    for product in ["101", other.as_str()] {
        let held = recorded_orders(&mut redis.conn().await, product).await;
        assert_eq!(held.len(), 1, "{product}: one unit, {held:?}");
    }
}

/// A keyed sale of a split product answered `503 unconfirmed` (its shard's replica
/// frozen), then the shard's master killed and the replica, which lacks the sale,
/// promoted: the key's repeat learns the sale did not survive, and the buyer, whose count
/// matches what they hold, buys again — the repeat sells afresh. Before, the key answered
/// `unconfirmed` for its whole TTL, and (one unit per buyer) every new key was refused 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_sale_a_failover_lost_resolves_and_the_buyer_buys_again() {
    let _turn = heavy_turn().await;
    let mut redis = RedisCluster::start(3, 1);
    let seckill = on_cluster(
        &redis,
        &[
            "--redis-wait-replicas",
            "1",
            "--redis-wait-timeout-ms",
            "300",
        ],
    );
    let api = seckill.api();
    // One unit in three shards: shard 0 has it, on another master than the product's own
    // slot (its claim and its buyers' counts), so that the failover loses the sale only.
    let mut product = None;
    for candidate in (101..300).map(|p| p.to_string()) {
        api.reset(&candidate, 1, 3).await;
        let stats = api.stats(&candidate).await;
        let port: Option<u16> = stats["shard_nodes"][0]
            .as_str()
            .and_then(|node| node.rsplit(':').next()?.parse().ok());
        if let Some(port) = port
            && port != master_of(&redis, &candidate)
        {
            product = Some((candidate, port));
            break;
        }
    }
    let (product, shard_master) = product.expect("a product whose shard 0 is elsewhere");
    api.reset_limited(&product, 1, 3, 1).await;
    let replica = redis.replica_of(shard_master);
    let shard = keys(&product).shard(&layout_of(&api, &product).await, 0);
    // The reset on the replica, then the replica made to lag.
    tokio::task::block_in_place(|| redis.wait_replicas_caught_up(shard_master));
    lag(&redis, shard_master, replica, &shard.stock).await;
    let path = "segmented?user=u1";
    let (status, first, _) = api.deduct_keyed(&product, path, "k-lost").await;
    assert_eq!(
        (status, first["outcome"].as_str()),
        (503, Some("unconfirmed")),
        "{first}"
    );
    redis.kill(shard_master);
    redis.signal(replica, "CONT");
    tokio::task::block_in_place(|| {
        redis.wait_for_failover(Duration::from_secs(30));
        redis.restart(shard_master);
        redis.wait_replica_synced(shard_master, Duration::from_secs(30));
    });
    let order = first["order"].as_str().unwrap_or_default();
    let kept = redis.cli(replica, &["hexists", &shard.orders, order]);
    assert_eq!(
        kept.trim(),
        "0",
        "the promoted replica lacks the sale (the premise)"
    );
    let (status, again, _) = until_200(&api, &product, path, "k-lost").await;
    eprintln!("the key's repeat after the failover: {status} {again}");
    assert_eq!(status, 200, "the buyer bought again: {again}");
    assert_ne!(again["order"], first["order"], "a new sale: {again}");
    let held = recorded_orders(&mut redis.conn().await, &product).await;
    assert_eq!(
        held.keys().collect::<Vec<_>>(),
        [again["order"].as_str().unwrap()],
        "the buyer holds the one unit they were answered"
    );
    let counted: Option<i64> = redis::cmd("HGET")
        .arg(&keys(&product).reserved)
        .arg("u1")
        .query_async(&mut redis.conn().await)
        .await
        .expect("HGET");
    assert_eq!(
        counted,
        Some(1),
        "the buyer's count is the one unit they hold"
    );
}

/// Orders of record hold only what Redis kept: a sale answered `503 unconfirmed` (its
/// replica lagging), its stream entry read by the instance's consumer, then its master
/// killed and the replica, which lacks it, promoted — PostgreSQL never gets that order,
/// and gets the next sale's once a replica has it: PostgreSQL's orders are Redis's. Before,
/// the consumer inserted what it read from the master, asking no replica, and the database
/// kept an order the failover erased (its unit sold again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_of_record_hold_only_what_a_failover_kept() {
    let _turn = heavy_turn().await;
    let postgres = Postgres::start();
    let mut redis = RedisCluster::start(3, 1);
    let db = postgres.url();
    let seckill = on_cluster(
        &redis,
        &[
            "--orders-db",
            &db,
            "--redis-wait-replicas",
            "1",
            "--redis-wait-timeout-ms",
            "300",
        ],
    );
    let api = seckill.api();
    api.reset("101", 10, 1).await;
    let (status, first) = api.deduct("101", "lua").await;
    assert_eq!(status, 200, "{first}");
    until_in_database(&postgres, &[first["order"].as_str().unwrap()]).await;

    let master = master_of(&redis, "101");
    let replica = redis.replica_of(master);
    let shard = keys("101").whole();
    tokio::task::block_in_place(|| redis.wait_replicas_caught_up(master));
    lag(&redis, master, replica, &shard.stock).await;
    let (status, lost) = api.deduct("101", "lua").await;
    assert_eq!(
        (status, lost["outcome"].as_str()),
        (503, Some("unconfirmed")),
        "{lost}"
    );
    // The consumer has read the sale's entry (the group's last delivered is the stream's
    // last entry): the old consumer inserted it then.
    let node = redis::Client::open(format!("redis://127.0.0.1:{master}")).unwrap();
    let mut conn = node.get_multiplexed_async_connection().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !delivered(&mut conn, &shard.stream).await {
        assert!(
            Instant::now() < deadline,
            "the consumer never read the sale"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    redis.kill(master);
    redis.signal(replica, "CONT");
    tokio::task::block_in_place(|| {
        redis.wait_for_failover(Duration::from_secs(30));
        redis.restart(master);
        redis.wait_replica_synced(master, Duration::from_secs(30));
    });
    let (status, next) = until_sold(&api, "101").await;
    assert_eq!(status, 200, "{next}");
    until_in_database(&postgres, &[next["order"].as_str().unwrap()]).await;

    let in_redis = recorded_orders(&mut redis.conn().await, "101").await;
    let in_db = orders_in_database(&postgres);
    let lost = lost["order"].as_str().unwrap();
    assert!(
        !in_redis.contains_key(lost),
        "the failover took the sale back (the premise)"
    );
    assert!(
        !in_db.contains(lost),
        "PostgreSQL has the order a failover erased"
    );
    let in_redis: std::collections::BTreeSet<String> = in_redis.into_keys().collect();
    assert_eq!(in_db, in_redis, "PostgreSQL's orders are Redis's");
}

/// Whether the orders' consumer group has read up to `stream`'s last entry.
async fn delivered(conn: &mut redis::aio::MultiplexedConnection, stream: &str) -> bool {
    let last: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
        .arg(stream)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(conn)
        .await
        .unwrap();
    let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query_async(conn)
        .await
        .unwrap_or_default();
    let Some((last, _)) = last.first() else {
        return false;
    };
    groups.iter().any(|group| {
        group
            .get("last-delivered-id")
            .and_then(|id| redis::from_redis_value_ref::<String>(id).ok())
            .as_deref()
            == Some(last)
    })
}

/// Every order of product 101 in the orders' database (none while the instance has not
/// made its tables yet).
fn orders_in_database(postgres: &Postgres) -> std::collections::BTreeSet<String> {
    let sql = "SELECT id FROM orders WHERE product = '101'";
    let out = std::process::Command::new("psql")
        .args([&postgres.url(), "-qAt", "-c", sql])
        .output()
        .expect("psql (postgresql-client, with the server)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Waits until the orders' database has every one of `orders` (30 s at most).
async fn until_in_database(postgres: &Postgres, orders: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let held = orders_in_database(postgres);
        if orders.iter().all(|o| held.contains(*o)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{orders:?} never reached PostgreSQL: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sells one unit of 101 (lua) until one is answered 200 (30 s at most): the last answer.
async fn until_sold(api: &Api, product: &str) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = api.deduct(product, "lua").await;
        if answer.0 == 200 || Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A master frozen for good (a hung host) while its replica is promoted: the instance's
/// sales of its product recover — its connection to the frozen node times out, and the
/// Cluster client is made anew (once, however many requests met the timeout), which finds
/// the promoted master. Before, redis-rs kept the frozen node's connection (a response
/// timeout neither reconnects it nor makes the client look at the slots again): every sale
/// of that product timed out for as long as the node stayed frozen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sales_recover_while_a_failed_over_master_stays_frozen() {
    let _turn = heavy_turn().await;
    let redis = RedisCluster::start(3, 1);
    let seckill = on_cluster(
        &redis,
        &[
            "--redis-timeout-ms",
            "400",
            "--redis-wait-timeout-ms",
            "200",
        ],
    );
    let api = seckill.api();
    api.reset("101", 1_000, 1).await;
    let (status, body) = api.deduct("101", "lua").await;
    assert_eq!(status, 200, "{body}");
    let master = master_of(&redis, "101");
    let replica = redis.replica_of(master);
    // The replica has the reset and the sale (no sale here waits for it): then the freeze.
    tokio::task::block_in_place(|| redis.wait_replicas_caught_up(master));
    redis.signal(master, "STOP");
    // Ready all along: the other masters' products sell (the frozen one named, once seen).
    let (status, ready) = api.get("/readyz").await;
    assert_eq!(status, 200, "ready while a master is frozen: {ready}");
    // The replica promoted (asked of it alone: the frozen node answers nothing).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !redis.cli(replica, &["role"]).starts_with("master") {
        assert!(Instant::now() < deadline, "the replica was never promoted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, ready) = api.get("/readyz").await;
    assert_eq!(status, 200, "ready once its replica took over: {ready}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut answers = std::collections::BTreeMap::new();
    let sold = loop {
        let (status, body) = api.deduct("101", "lua").await;
        *answers.entry(status).or_insert(0) += 1;
        if status == 200 || Instant::now() >= deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    redis.signal(master, "CONT");
    eprintln!("answers while the old master stayed frozen: {answers:?}");
    assert_eq!(sold.0, 200, "101 sells on its promoted master: {}", sold.1);
}

/// A product whose slot is migrating to another master, its keys moved already: what
/// reads one key at a time goes on (`/stock`: the source answers `ASK`, and the command is
/// sent to the importing master after `ASKING`); a sale, whose script takes keys that are
/// on neither master yet (its void hash, its keys hash), is refused by Redis itself
/// (`TRYAGAIN`: no multi-key command while a slot is split) and answered `503`, nothing
/// sold, retry — and sells again once the slot is the other master's. Before, the command
/// was sent again without `ASKING`, the importing master sent it back (`MOVED`), and
/// `/stock` failed `503` while the slot moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrating_slot_is_read_through_asking_and_sells_once_moved() {
    let _turn = heavy_turn().await;
    let redis = RedisCluster::start(3, 1);
    let seckill = on_cluster(&redis, &[]);
    let api = seckill.api();
    api.reset("101", 100, 1).await;
    let (status, body) = api.deduct("101", "lua").await;
    assert_eq!(status, 200, "{body}");
    let source = master_of(&redis, "101");
    let target = *redis
        .master_ports()
        .iter()
        .find(|&&p| p != source)
        .expect("another master");
    let slot = redis
        .cli(source, &["cluster", "keyslot", &keys("101").whole().stock])
        .trim()
        .to_owned();
    let id = |port: u16| redis.cli(port, &["cluster", "myid"]).trim().to_owned();
    let (source_id, target_id) = (id(source), id(target));
    let set = |port: u16, args: &[&str]| {
        let out = redis.cli(port, args);
        assert!(out.contains("OK"), "{args:?}: {out}");
    };
    set(
        target,
        &["cluster", "setslot", &slot, "importing", &source_id],
    );
    set(
        source,
        &["cluster", "setslot", &slot, "migrating", &target_id],
    );
    // Every key of the slot moved: the source answers ASK for any of them.
    let keys_of_slot = redis.cli(source, &["cluster", "getkeysinslot", &slot, "1000"]);
    let moved: Vec<&str> = keys_of_slot.lines().filter(|k| !k.is_empty()).collect();
    assert!(!moved.is_empty(), "101's keys on its slot");
    let port = target.to_string();
    let mut migrate = vec!["migrate", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    migrate.extend(&moved);
    let out = redis.cli(source, &migrate);
    assert!(out.contains("OK"), "MIGRATE: {out}");

    let (status, stock) = api.get("/stock?product=101").await;
    assert_eq!(status, 200, "/stock while 101's slot migrates: {stock}");
    assert_eq!(int(&stock, "remaining"), 99, "{stock}");
    for variant in ["lua", "watchdog"] {
        let (status, during) = api.deduct("101", variant).await;
        assert!(
            status == 200
                || (status, during["outcome"].as_str()) == (503, Some("redis_unavailable")),
            "{variant} while 101's slot migrates: {status} {during}"
        );
    }
    for port in redis.master_ports() {
        set(port, &["cluster", "setslot", &slot, "node", &target_id]);
    }
    let (status, after) = until_sold(&api, "101").await;
    assert_eq!(status, 200, "once the slot moved: {after}");
    let stats = api.stats("101").await;
    let sold = int(&stats, "sold");
    assert!(
        sold >= 2,
        "the sale before and the one after the move: {stats}"
    );
    assert_eq!(sold + int(&stats, "remaining"), 100, "{stats}");
}

/// A master promoted by a failover has none of the scripts (Redis does not replicate its
/// script cache): the first sale there loads them on that master alone, so it sells while
/// another master is frozen. Before, redis-rs loaded a script on every master it had a
/// connection to at once (`SCRIPT LOAD` fanned out), which waited out the frozen one and
/// failed: the sale was answered as a lost answer, and nothing sold on the promoted master
/// until every master answered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_master_sells_while_another_master_is_frozen() {
    let _turn = heavy_turn().await;
    let mut redis = RedisCluster::start(3, 1);
    // Each command bounded well inside the Cluster's node timeout (2 s): the frozen master
    // is not failed over while the sales below are answered.
    let seckill = on_cluster(
        &redis,
        &[
            "--redis-timeout-ms",
            "400",
            "--redis-wait-timeout-ms",
            "200",
        ],
    );
    let api = seckill.api();
    let other = on_another_master(&redis, "101");
    for product in ["101", other.as_str()] {
        api.reset(product, 10, 1).await;
        let (status, body) = api.deduct(product, "lua").await;
        assert_eq!(status, 200, "{body}");
    }
    let master = master_of(&redis, "101");
    redis.kill(master);
    tokio::task::block_in_place(|| {
        redis.wait_for_failover(Duration::from_secs(30));
        redis.restart(master);
        redis.wait_replica_synced(master, Duration::from_secs(30));
    });
    // The instance has found the promoted master.
    until_status(&api, "/stats?product=101", 200).await;
    let promoted = master_of(&redis, "101");
    let scripts = redis.cli(promoted, &["script", "exists", &lua_sha()]);
    assert!(
        scripts.trim().ends_with('0'),
        "the promoted master lacks the script: {scripts}"
    );
    // Another master freezes; 101's answers, and has none of the scripts.
    let frozen = master_of(&redis, &other);
    redis.signal(frozen, "STOP");
    let lua = api.deduct("101", "lua").await;
    let watchdog = api.deduct("101", "watchdog").await;
    redis.signal(frozen, "CONT");
    assert_eq!(lua.0, 200, "lua on the promoted master: {}", lua.1);
    assert_eq!(
        watchdog.0, 200,
        "watchdog on the promoted master: {}",
        watchdog.1
    );
}

/// The SHA1 of `lua/deduct.lua` as the service loads it (its library in front of it).
fn lua_sha() -> String {
    let body = [
        include_str!("../../lua/lib/critical.lua"),
        include_str!("../../lua/deduct.lua"),
    ]
    .concat();
    redis::Script::new(&body).get_hash().to_owned()
}

/// The replica on `replica` of the master on `master` made to lag: frozen, and its link
/// filled (32 MiB written under `key`'s slot, more than the kernel buffers hold between
/// them), so that what the master writes next stays in the master's own buffer — lost
/// with it if it dies. (A frozen replica alone still receives, into its socket; what it
/// has not read is lost all the same when the master is killed, whose connection is then
/// reset.)
async fn lag(redis: &RedisCluster, master: u16, replica: u16, key: &str) {
    redis.signal(replica, "STOP");
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{master}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("a connection to the master");
    let tag = &key[key.find('{').unwrap()..=key.find('}').unwrap()];
    let mib = vec![b'x'; 1 << 20];
    for n in 0..32 {
        let _: () = redis::cmd("SET")
            .arg(format!("filler:{tag}:{n}"))
            .arg(&mib)
            .query_async(&mut conn)
            .await
            .expect("SET");
    }
}

/// A product's layout as the service recorded it.
async fn layout_of(api: &Api, product: &str) -> seckill::keys::Layout {
    let stats = api.stats(product).await;
    let tags: Vec<String> = stats["shard_tags"]
        .as_array()
        .expect("shard_tags")
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();
    let id = seckill::keys::ProductId::parse(product).expect("a product id");
    seckill::keys::Layout::from_tags(&id, tags).expect("the shards' tags")
}

/// Until `path` answers `status` (30 s at most).
async fn until_status(api: &Api, path: &str, status: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (got, body) = api.get(path).await;
        if got == status {
            return;
        }
        assert!(Instant::now() < deadline, "{path}: {got} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
