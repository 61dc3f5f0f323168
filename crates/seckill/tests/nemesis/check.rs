//! What must hold after the nemesis, checked against only what the buyers were answered
//! and what Redis and PostgreSQL hold — never against what the service says of itself in
//! `/stats`.
//!
//! - every 200 names an order that is in Redis and once in PostgreSQL, sold to that buyer;
//! - a key answers one order, ever: its 200s name one order, and at most one shard sold
//!   under it (that order, when it answered one);
//! - no buyer holds more units than the product allows one buyer;
//! - sold + remaining = initial: every unit that left the stock is an order;
//! - a cart answered 200 sold its buyer a unit of every product in it;
//! - PostgreSQL holds exactly the orders Redis holds;
//! - a buyer whose order exists gets it for the key that bought it: every key that sold,
//!   asked again after the run, is answered 200 with its order ([`again`]);
//! - no answer was a 500;
//! - no sale checked against its watchdog lock ran more than a lease after it was sent;
//! - through a waiting room: no buyer let in was told "sold out" while units were left
//!   (none are sold back, so a unit left at the end was left at every 409 before it).
//!
//! `naive` is held to what it promises: keys and orders, not the stock or the limit, which
//! it gets wrong by design.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use redis::AsyncCommands;
use seckill::keys::{Layout, ProductId, ProductKeys};

use crate::again;
use crate::buyers::{History, told};
use crate::world::{LEASE_MS, Sale, World};

/// What a clock read on the instance and one read in Redis may differ by, ms (one machine).
const LATE_SLACK_MS: i64 = 300;

/// What the checker found.
pub struct Found {
    pub violations: Vec<String>,
    /// One line per product: what was sold and answered.
    lines: Vec<String>,
}

impl Found {
    pub fn summary(&self) -> String {
        let mut out = String::from("per product:");
        for line in &self.lines {
            let _ = write!(out, "\n  {line}");
        }
        out
    }
}

/// One product as Redis holds it.
struct InRedis {
    /// Order id -> its buyer ('' for none).
    orders: BTreeMap<String, String>,
    /// Units in every shard's stock, and in the shares instances hold.
    remaining: i64,
    /// Idempotency key -> the orders sold under it, one per shard that sold under it.
    keys: BTreeMap<String, Vec<String>>,
    /// The shards' and the product's own `keys_sold_twice` counters.
    keys_sold_twice: i64,
}

pub async fn check(world: &World, history: &History) -> Found {
    let mut found = Found {
        violations: Vec::new(),
        lines: Vec::new(),
    };
    let v = &mut found.violations;
    let mut sold_keys = Vec::new();
    for (index, sale) in world.sales.iter().enumerate() {
        let products: Vec<&str> = std::iter::once(sale.product)
            .chain(sale.also.iter().copied())
            .collect();
        let mut redis = BTreeMap::new();
        for product in &products {
            let held = in_redis(world, product).await;
            let db = database_orders(world, product).await;
            check_stores(v, sale, product, &held, &db);
            redis.insert(*product, (held, db));
        }
        let (held, db) = &redis[sale.product];
        sold_keys.push((index, held.keys.clone()));
        let clicks: Vec<_> = history.clicks.iter().filter(|c| c.sale == index).collect();
        let mut answered = BTreeSet::new();
        for click in &clicks {
            for sent in &click.sends {
                if sent.status == Some(500) {
                    v.push(format!(
                        "{}: a 500 ({}) for {} ({:?})",
                        sale.product, sent.outcome, click.user, click.key
                    ));
                }
            }
            let orders: BTreeSet<&str> = click.orders().collect();
            if orders.len() > 1 {
                v.push(format!(
                    "{}: key {:?} answered {} orders: {orders:?}; told: {}",
                    sale.product,
                    click.key,
                    orders.len(),
                    told(&click.sends)
                ));
            }
            if !orders.is_empty() {
                for line in sale.also {
                    let (others, _) = &redis[line];
                    if !others.orders.values().any(|buyer| *buyer == click.user) {
                        v.push(format!(
                            "{}: a cart answered 200 to {} ({:?}), who has no unit of {line}",
                            sale.product, click.user, click.key
                        ));
                    }
                }
            }
            for order in &orders {
                answered.insert(order.to_string());
                match held.orders.get(*order) {
                    None => v.push(format!(
                        "{}: order {order} answered 200 to {} is not in Redis",
                        sale.product, click.user
                    )),
                    Some(buyer) if *buyer != click.user => v.push(format!(
                        "{}: order {order} answered 200 to {} is {buyer}'s in Redis",
                        sale.product, click.user
                    )),
                    Some(_) => {}
                }
                match db.get(*order).map(|o| &o.buyer) {
                    None => v.push(format!(
                        "{}: order {order} answered 200 to {} is not in PostgreSQL",
                        sale.product, click.user
                    )),
                    Some(buyer) if *buyer != click.user => v.push(format!(
                        "{}: order {order} answered 200 to {} is {buyer}'s in PostgreSQL",
                        sale.product, click.user
                    )),
                    Some(_) => {}
                }
            }
            if let Some(key) = &click.key
                && let Some(sold) = held.keys.get(key)
            {
                if sold.len() > 1 {
                    v.push(format!(
                        "{}: key {key} ({}) sold in {} shards: orders {sold:?}; told: {}",
                        sale.product,
                        click.user,
                        sold.len(),
                        told(&click.sends)
                    ));
                } else if let Some(order) = orders.first()
                    && sold[0] != *order
                {
                    v.push(format!(
                        "{}: key {key} ({}) answered order {order}, but sold {}; told: {}",
                        sale.product,
                        click.user,
                        sold[0],
                        told(&click.sends)
                    ));
                }
            }
        }
        // What a buyer over the limit was told, click by click: the evidence of how.
        let mut units: BTreeMap<&str, i64> = BTreeMap::new();
        for buyer in held.orders.values() {
            *units.entry(buyer.as_str()).or_default() += 1;
        }
        for (buyer, _) in units
            .iter()
            .filter(|&(_, &n)| sale.exact && n > sale.per_user)
        {
            for click in clicks.iter().filter(|c| c.user == *buyer) {
                found.lines.push(format!(
                    "{} {buyer}, over the limit: the click under {:?} was told {}",
                    sale.product,
                    click.key,
                    told(&click.sends)
                ));
            }
        }
        // A sale that ran in Redis more than a lease after it was sent: a commit checked
        // against its lock cannot (the lease ran out meanwhile, and nobody renews a lease
        // in a paused Redis); one fenced, or not checked, can. Its time is read as its
        // script begins: a Redis stopped in the middle of a script finishes it when it
        // wakes, and a time read after the checks would be the wake-up's.
        let delays: Vec<(i64, &str)> = db
            .iter()
            .filter_map(|(order, o)| Some((delay_ms(order, o)?, order.as_str())))
            .collect();
        let latest = delays.iter().max().copied();
        if sale.holder_checked
            && let Some((late, order)) = latest
            && late > LEASE_MS + LATE_SLACK_MS
        {
            v.push(format!(
                "{}: order {order} ran {late} ms after it was sent, past its {LEASE_MS} ms lease",
                sale.product
            ));
        }
        if sale.room && held.remaining > 0 {
            let told = clicks
                .iter()
                .flat_map(|c| &c.sends)
                .filter(|s| s.status == Some(409))
                .count();
            if told > 0 {
                v.push(format!(
                    "{}: {told} buyers let in were told sold out with {} units left",
                    sale.product, held.remaining
                ));
            }
        }
        let unanswered = held
            .orders
            .keys()
            .filter(|o| !answered.contains(*o))
            .count();
        let twos = clicks
            .iter()
            .filter(|c| c.orders().next().is_some())
            .count();
        found.lines.push(format!(
            "{} {}: {} clicks, {twos} answered 200; {} sold ({} never answered 200), {} remaining of {}; {} buyers; the latest sale ran {} ms after it was sent",
            sale.product,
            sale.path,
            clicks.len(),
            held.orders.len(),
            unanswered,
            held.remaining,
            sale.stock,
            held.orders.values().collect::<BTreeSet<_>>().len(),
            latest.map_or(0, |(late, _)| late),
        ));
    }
    // Last: asking again sends requests, which must not move what was read above.
    let mut asked = again::sold_keys_answer_their_order(world, history, &sold_keys).await;
    found.lines.push(format!(
        "asked again after the run: {} keys that sold, in {} sends, {} not answered their \
         order; the slowest, {} ms: {}",
        asked.keys,
        asked.sends,
        asked.violations.len(),
        asked.slowest.0.as_millis(),
        asked.slowest.1,
    ));
    found.violations.append(&mut asked.violations);
    found
}

/// What must hold between one product's two stores and its stock.
fn check_stores(
    v: &mut Vec<String>,
    sale: &Sale,
    product: &str,
    held: &InRedis,
    db: &BTreeMap<String, DbOrder>,
) {
    if held.keys_sold_twice > 0 {
        v.push(format!(
            "{product}: Redis counted {} keys sold twice",
            held.keys_sold_twice
        ));
    }
    for (key, sold) in &held.keys {
        if sold.len() > 1 {
            v.push(format!(
                "{product}: key {key} sold in {} shards: {sold:?}",
                sold.len()
            ));
        }
    }
    let only_redis: Vec<_> = held
        .orders
        .keys()
        .filter(|o| !db.contains_key(*o))
        .collect();
    let only_db: Vec<_> = db
        .keys()
        .filter(|o| !held.orders.contains_key(*o))
        .collect();
    if !only_redis.is_empty() || !only_db.is_empty() {
        v.push(format!(
            "{product}: {} orders only in Redis ({:?}…), {} only in PostgreSQL ({:?}…)",
            only_redis.len(),
            only_redis.iter().take(3).collect::<Vec<_>>(),
            only_db.len(),
            only_db.iter().take(3).collect::<Vec<_>>()
        ));
    }
    if !sale.exact {
        return;
    }
    let sold = held.orders.len() as i64;
    if sold + held.remaining != sale.stock {
        v.push(format!(
            "{product}: {sold} sold + {} remaining is not the {} units it started with",
            held.remaining, sale.stock
        ));
    }
    let in_db: BTreeMap<&String, &String> = db.iter().map(|(o, d)| (o, &d.buyer)).collect();
    let in_redis: BTreeMap<&String, &String> = held.orders.iter().collect();
    for (store, orders) in [("Redis", &in_redis), ("PostgreSQL", &in_db)] {
        let mut by_buyer: BTreeMap<&str, i64> = BTreeMap::new();
        for buyer in orders.values() {
            *by_buyer.entry(buyer.as_str()).or_default() += 1;
        }
        for (buyer, units) in by_buyer {
            if units > sale.per_user {
                v.push(format!(
                    "{product}: {buyer} holds {units} units in {store}, the limit is {}",
                    sale.per_user
                ));
            }
        }
    }
}

/// Every order Redis holds for `product`: order id -> buyer ('' for none).
pub async fn redis_orders(world: &World, product: &str) -> BTreeMap<String, String> {
    let id = ProductId::parse(product).expect("a product id");
    let mut conn = world.stock.conn().await;
    seckill::product::recorded_orders(&mut conn, &id)
        .await
        .expect("the orders, from Redis")
        .into_iter()
        .map(|(order, who)| {
            // "<instance> <variant>[ <buyer>]"
            let buyer = who.split(' ').nth(2).unwrap_or_default().to_owned();
            (order, buyer)
        })
        .collect()
}

/// `product` as Redis holds it, shard by shard.
async fn in_redis(world: &World, product: &str) -> InRedis {
    let id = ProductId::parse(product).expect("a product id");
    let keys = ProductKeys::new(&id);
    let mut conn = world.stock.conn().await;
    let (shards, tags): (Option<u32>, Option<String>) = redis::cmd("HMGET")
        .arg(&keys.meta)
        .arg("shards")
        .arg("tags")
        .query_async(&mut conn)
        .await
        .expect("the product's meta");
    let layout = Layout::from_meta(&id, shards.unwrap_or(1), tags.as_deref());
    let product_twice: Option<i64> = conn.hget(&keys.audit, "keys_sold_twice").await.unwrap();
    let mut held = InRedis {
        orders: redis_orders(world, product).await,
        remaining: 0,
        keys: BTreeMap::new(),
        keys_sold_twice: product_twice.unwrap_or(0),
    };
    for index in 0..layout.shards() {
        let shard = keys.shard(&layout, index);
        let stock: Option<i64> = conn.get(&shard.stock).await.expect("a shard's stock");
        let in_shares: Vec<i64> = conn.hvals(&shard.shares).await.expect("the shares");
        held.remaining += stock.unwrap_or(0) + in_shares.iter().sum::<i64>();
        let sold: BTreeMap<String, String> = conn
            .hgetall(&shard.keys)
            .await
            .expect("the keys sold under");
        // Each record is "<order> <until ms>" (kept for the key's TTL).
        for (key, record) in sold {
            let order = record.split(' ').next().unwrap_or_default().to_owned();
            held.keys.entry(key).or_default().push(order);
        }
        let twice: Option<i64> = conn.hget(&shard.audit, "keys_sold_twice").await.unwrap();
        held.keys_sold_twice += twice.unwrap_or(0);
    }
    held
}

/// One order as PostgreSQL holds it.
pub struct DbOrder {
    /// '' for none.
    pub buyer: String,
    /// When its sale's script began its checks, by Redis's clock (ms).
    pub sold_at_ms: i64,
}

/// Every order PostgreSQL holds for `product`'s current sale (its epoch in Redis).
pub async fn database_orders(world: &World, product: &str) -> BTreeMap<String, DbOrder> {
    let keys = ProductKeys::new(&ProductId::parse(product).expect("a product id"));
    let epoch: Option<i64> = world
        .stock
        .conn()
        .await
        .hget(&keys.meta, "epoch")
        .await
        .expect("the product's epoch");
    let sql = format!(
        "SELECT id || '|' || coalesce(buyer, '') || '|' || \
         (extract(epoch FROM sold_at) * 1000)::bigint FROM orders \
         WHERE product = '{product}' AND epoch = {}",
        epoch.unwrap_or(0)
    );
    let rows = tokio::task::block_in_place(|| world.postgres.query(&sql));
    rows.lines()
        .filter_map(|line| {
            let mut fields = line.split('|');
            let (id, buyer, at) = (fields.next()?, fields.next()?, fields.next()?);
            let order = DbOrder {
                buyer: buyer.to_owned(),
                sold_at_ms: at.parse().ok()?,
            };
            Some((id.to_owned(), order))
        })
        .collect()
}

/// How long after its order id was made (by the instance, just before it sent the sale:
/// a UUIDv7 carries the time) the sale ran in Redis, ms.
fn delay_ms(order: &str, db: &DbOrder) -> Option<i64> {
    let (secs, nanos) = uuid::Uuid::parse_str(order)
        .ok()?
        .get_timestamp()?
        .to_unix();
    let sent = i64::try_from(secs).ok()? * 1_000 + i64::from(nanos / 1_000_000);
    Some(db.sold_at_ms - sent)
}
