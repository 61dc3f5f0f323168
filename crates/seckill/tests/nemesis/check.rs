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
//! - no answer was a 500.
//!
//! `naive` is held to what it promises: keys and orders, not the stock or the limit, which
//! it gets wrong by design.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use redis::AsyncCommands;
use seckill::keys::{Layout, ProductId, ProductKeys};

use crate::buyers::History;
use crate::world::{SALES, Sale, World};

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
    /// Units in every shard's stock, and in the shares' claims.
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
    for (index, sale) in SALES.iter().enumerate() {
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
                    "{}: key {:?} answered {} orders: {orders:?}",
                    sale.product,
                    click.key,
                    orders.len()
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
                match db.get(*order) {
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
                        "{}: key {key} ({}) sold in {} shards: orders {sold:?}; answered {orders:?}",
                        sale.product,
                        click.user,
                        sold.len()
                    ));
                } else if let Some(order) = orders.first()
                    && sold[0] != *order
                {
                    v.push(format!(
                        "{}: key {key} ({}) answered order {order}, but sold {}",
                        sale.product, click.user, sold[0]
                    ));
                }
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
            "{} {}: {} clicks, {twos} answered 200; {} sold ({} never answered 200), {} remaining of {}; {} buyers",
            sale.product,
            sale.path,
            clicks.len(),
            held.orders.len(),
            unanswered,
            held.remaining,
            sale.stock,
            held.orders.values().collect::<BTreeSet<_>>().len(),
        ));
    }
    found
}

/// What must hold between one product's two stores and its stock.
fn check_stores(
    v: &mut Vec<String>,
    sale: &Sale,
    product: &str,
    held: &InRedis,
    db: &BTreeMap<String, String>,
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
    for (store, orders) in [("Redis", &held.orders), ("PostgreSQL", db)] {
        let mut by_buyer: BTreeMap<&str, i64> = BTreeMap::new();
        for buyer in orders.values() {
            *by_buyer.entry(buyer).or_default() += 1;
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
    let mut conn = world.redis.conn().await;
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
    let mut conn = world.redis.conn().await;
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
        let claimed: Vec<i64> = conn.hvals(&shard.claims).await.expect("the shares' claims");
        held.remaining += stock.unwrap_or(0) + claimed.iter().sum::<i64>();
        let sold: BTreeMap<String, String> = conn
            .hgetall(&shard.keys)
            .await
            .expect("the keys sold under");
        for (key, order) in sold {
            held.keys.entry(key).or_default().push(order);
        }
        let twice: Option<i64> = conn.hget(&shard.audit, "keys_sold_twice").await.unwrap();
        held.keys_sold_twice += twice.unwrap_or(0);
    }
    held
}

/// Every order PostgreSQL holds for `product`'s current sale (its epoch in Redis): order
/// id -> buyer ('' for none).
pub async fn database_orders(world: &World, product: &str) -> BTreeMap<String, String> {
    let keys = ProductKeys::new(&ProductId::parse(product).expect("a product id"));
    let epoch: Option<i64> = world
        .redis
        .conn()
        .await
        .hget(&keys.meta, "epoch")
        .await
        .expect("the product's epoch");
    let sql = format!(
        "SELECT id || '|' || coalesce(buyer, '') FROM orders \
         WHERE product = '{product}' AND epoch = {}",
        epoch.unwrap_or(0)
    );
    let rows = tokio::task::block_in_place(|| world.postgres.query(&sql));
    rows.lines()
        .filter_map(|line| line.split_once('|'))
        .map(|(order, buyer)| (order.to_owned(), buyer.to_owned()))
        .collect()
}
