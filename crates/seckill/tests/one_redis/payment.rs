//! Payment or expiry: with `pay_within_ms`, a sale reserves its unit; paid in time, the
//! buyer keeps it; unpaid, it goes back to the stock it came from and the buyer may buy
//! again; a payment racing the expiry is either paid or told "expired", never both.

use std::collections::BTreeMap;
use std::time::Duration;

use seckill_testkit::{Api, Nginx, Postgres, Service, int};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::variants::with_knob;
use crate::{SECKILL, service};

/// Every variant of the progression, so every kind of stock a unit can come from: one
/// shard (under a lock, a watchdog-locked one, in a transaction, in a script), one of
/// several shards, an instance's share of the pool (of two units, so that it takes another).
/// The buyers here buy one after another: naive sells as exactly as the rest.
fn variants() -> Vec<(String, u32)> {
    crate::variants::progression(&[("share_units", "2")], 4)
        .into_iter()
        .map(|(_, path, shards)| (path, shards))
        .collect()
}

/// `/stats` once nothing is reserved any more (or after `within`).
async fn settled(api: &Api, product: &str, within: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let stats = api.stats(product).await;
        if stats["payment"]["reserved"] == 0 || tokio::time::Instant::now() >= deadline {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Buyer `user` buys one unit of `product`: the order id and the shard, from a 200.
async fn buy(api: &Api, product: &str, variant: &str, user: &str) -> (String, i64) {
    let (status, body) = api
        .deduct(product, &with_knob(variant, &format!("user={user}")))
        .await;
    assert_eq!(status, 200, "{variant} {user}: {body}");
    (
        body["order"].as_str().unwrap().to_owned(),
        int(&body, "shard"),
    )
}

/// Four buyers, one unit each (the limit), two pay in time: they keep their units, a
/// repeated payment changes nothing, and the buyers that paid cannot buy again. The other
/// two reservations expire: their units return to the shards they came from, a late
/// payment is 410 `expired`, and their buyers may buy again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paid_in_time_keeps_the_unit_and_expiry_returns_it_to_its_shard() {
    let _turn = seckill_testkit::heavy_turn().await;
    let cluster = service(2, &["--expiry-sweep-ms", "50"]);
    let api = cluster.api(0);
    let other = cluster.api(1);
    for (variant, shards) in variants() {
        let variant = variant.as_str();
        let product = "101";
        api.reset_with(json!({
            "product": product, "stock": 8, "shards": shards, "per_user": 1,
            "pay_within_ms": 1_500,
        }))
        .await;
        let mut orders = Vec::new();
        for user in ["u1", "u2", "u3", "u4"] {
            orders.push(buy(&api, product, variant, user).await);
        }
        let before = api.stats(product).await;
        assert_eq!(before["payment"]["reserved"], 4, "{variant}: {before}");
        assert_eq!(int(&before, "remaining"), 4, "{variant}: {before}");

        for (order, _) in &orders[..2] {
            let (status, body) = other.pay(product, order).await;
            assert_eq!((status, &body["outcome"]), (200, &json!("paid")), "{body}");
            assert_eq!(body["replayed"], false, "{variant}: {body}");
        }
        let (status, again) = api.pay(product, &orders[0].0).await;
        assert_eq!((status, &again["replayed"]), (200, &json!(true)), "{again}");
        let (status, body) = api.deduct(product, &with_knob(variant, "user=u1")).await;
        assert_eq!(status, 403, "{variant}: u1 paid for their one unit: {body}");

        let stats = settled(&api, product, Duration::from_secs(10)).await;
        let payment = &stats["payment"];
        assert_eq!(
            (&payment["paid"], &payment["expired"], &payment["reserved"]),
            (&json!(2), &json!(2), &json!(0)),
            "{variant}: {stats}"
        );
        assert_eq!(payment["balanced"], true, "{variant}: {stats}");
        assert_eq!(int(&stats, "remaining"), 6, "{variant}: {stats}");
        assert_eq!(
            (int(&stats, "oversold"), int(&stats, "lost_updates")),
            (0, 0),
            "{variant}: {stats}"
        );
        if shards > 1 {
            // Each expired unit is back on the shard that sold it.
            let mut expected: Vec<i64> = before["shard_remaining"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            for (_, shard) in &orders[2..] {
                expected[*shard as usize] += 1;
            }
            assert_eq!(stats["shard_remaining"], json!(expected), "{variant}");
        }
        for (order, _) in &orders[2..] {
            let (status, body) = api.pay(product, order).await;
            assert_eq!(
                (status, &body["outcome"]),
                (410, &json!("expired")),
                "{body}"
            );
        }
        // The buyers whose reservations expired may buy again.
        for user in ["u3", "u4"] {
            buy(&other, product, variant, user).await;
        }
        let (status, body) = api.pay(product, &Uuid::now_v7().to_string()).await;
        assert_eq!(status, 404, "{variant}: {body}");
    }
    // A sale with no payment window has nothing to pay.
    api.reset("102", 1, 1).await;
    let (order, _) = buy(&api, "102", "lua", "u1").await;
    let (status, body) = api.pay("102", &order).await;
    assert_eq!(
        (status, &body["outcome"]),
        (409, &json!("not_reserved")),
        "{body}"
    );
}

/// 200 reservations, and 200 payments sent around their deadlines (from 40 ms before to 40
/// ms after) while two instances sweep every 10 ms: every order ends paid or expired,
/// never both; a 200 means paid and a 410 expired, in Redis and in PostgreSQL; the stock
/// is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_racing_the_expiry_end_paid_or_expired_never_both() {
    let _turn = seckill_testkit::heavy_turn().await;
    let db = Postgres::start();
    let url = db.url();
    let cluster = Service::start(
        SECKILL,
        2,
        &["--orders-db", &url, "--expiry-sweep-ms", "10"],
    );
    let nginx = Nginx::start(&cluster.instances);
    let api = Api::new(&nginx.url(""));
    const ORDERS: usize = 200;
    const WINDOW_MS: u64 = 1_500;
    // Two variants, not every one: the race is the sweep's against the payment, the same
    // whatever sold the unit; an unsplit stock and a split one.
    for (variant, shards) in [("lua", 1), ("segmented", 4)] {
        let product = "101";
        api.reset_with(json!({
            "product": product, "stock": ORDERS, "shards": shards,
            "pay_within_ms": WINDOW_MS,
        }))
        .await;
        let load = api
            .load(product, variant)
            .requests(ORDERS)
            .concurrency(50)
            .keeping_orders();
        let report = api.run(load).await;
        assert_eq!(report.count(200), ORDERS, "{variant}: {report:?}");

        // Each payment leaves at its order's deadline plus an offset from -40 to +40 ms.
        // (An order id is a UUIDv7: it carries the ms it was made at, just before the
        // sale's script ran.)
        let mut payments = tokio::task::JoinSet::new();
        for (i, order) in report.orders.iter().enumerate() {
            let made = Uuid::parse_str(order).unwrap().get_timestamp().unwrap();
            let (secs, nanos) = made.to_unix();
            let deadline = Duration::new(secs, nanos) + Duration::from_millis(WINDOW_MS);
            let offset = (i % 81) as i64 - 40;
            let (api, order) = (api.clone(), order.clone());
            payments.spawn(async move {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap();
                let at = deadline.as_millis() as i64 + offset;
                let wait = (at - now.as_millis() as i64).max(0) as u64;
                tokio::time::sleep(Duration::from_millis(wait)).await;
                let (status, _) = api.pay(product, &order).await;
                (order, status)
            });
        }
        let answers: BTreeMap<String, u16> = payments.join_all().await.into_iter().collect();
        let count = |s: u16| answers.values().filter(|&&a| a == s).count();
        let (paid, expired) = (count(200), count(410));
        println!("{variant}: {paid} paid, {expired} expired, of {ORDERS} raced");
        assert_eq!(
            paid + expired,
            ORDERS,
            "{variant}: only 200 and 410: {answers:?}"
        );

        let stats = settled(&api, product, Duration::from_secs(10)).await;
        let payment = &stats["payment"];
        assert_eq!(int(payment, "paid"), paid as i64, "{variant}: {stats}");
        assert_eq!(
            int(payment, "expired"),
            expired as i64,
            "{variant}: {stats}"
        );
        assert_eq!(payment["balanced"], true, "{variant}: {stats}");
        assert_eq!(
            int(&stats, "remaining"),
            expired as i64,
            "{variant}: {stats}"
        );
        assert_eq!(int(&stats, "oversold"), 0, "{variant}: {stats}");

        // The database agrees, order by order, once the backlog has drained.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let stats = loop {
            let stats = api.stats(product).await;
            let record = &stats["orders_of_record"];
            if (record["backlog"] == 0 && record["drift"] == 0)
                || tokio::time::Instant::now() >= deadline
            {
                break stats;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let record = &stats["orders_of_record"];
        assert_eq!(record["drift"], 0, "{variant}: {stats}");
        assert_eq!(int(record, "settled_in_database"), ORDERS as i64, "{stats}");
        for (status, outcome) in [(200, "paid"), (410, "expired")] {
            let ids: Vec<String> = answers
                .iter()
                .filter(|(_, s)| **s == status)
                .map(|(o, _)| format!("'{o}'"))
                .collect();
            if ids.is_empty() {
                continue;
            }
            let found = db.query(&format!(
                "SELECT count(*) FROM order_settlements WHERE outcome = '{outcome}' AND id IN ({})",
                ids.join(",")
            ));
            assert_eq!(
                found,
                ids.len().to_string(),
                "{variant}: every {status} is {outcome}"
            );
        }
    }
}
