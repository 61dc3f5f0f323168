//! Product-level operations: setting the stock (reset), where a product's shards live,
//! its locks forced free, and (`audit`) the audit behind `/stats`.

mod audit;
mod reset;
mod stats;

pub use audit::{recorded_orders, settled_orders, stats};
pub use reset::{reset, reset_with_database};
pub use stats::{LockView, Reconciliation, Stats};

use futures_util::future::try_join_all;
use redis::AsyncCommands;

use crate::admission::Opening;
use crate::error::AppError;
use crate::keys::{Layout, ProductId, ProductKeys, shard_tag};
use crate::store::{Master, Store, key_slot};

/// The most shards a product may be split into.
pub const MAX_SHARDS: u32 = 64;
/// The longest payment window a reset may set: a day.
pub const MAX_PAY_WITHIN_MS: i64 = 86_400_000;
/// The most units a reset may set.
pub const MAX_STOCK: i64 = 100_000_000;

/// What a reset sets: the terms of a new sale.
#[derive(Debug, Clone, Copy, Default)]
pub struct Terms {
    /// Units for sale.
    pub stock: i64,
    /// Shards the stock is split over (1: unsplit).
    pub shards: u32,
    /// Units one buyer may have (0: no limit).
    pub per_user: i64,
    /// How long a buyer has to pay (0: a sale is final). With a window, a sale reserves
    /// its unit until `POST /orders/{id}/pay`, and the unit returns to its shard if
    /// unpaid in time (see `crate::payment`).
    pub pay_within_ms: i64,
    /// Whether the sale's critical sections go on its timeline (`GET /trace`): the page's
    /// lessons trace; a sale that does not pays nothing for it.
    pub trace: bool,
    /// The stock is in PostgreSQL (`stock_in: postgres`, the `pg_*` stock variants): Redis
    /// keeps the sale's meta and audit counters, and no stock key, so no Redis variant
    /// sells it.
    pub in_database: bool,
    /// The sale's front door: a waiting room, a per-buyer rate limit, the sold-out flag
    /// (`crate::admission`); the default lets every request through to the stock.
    pub door: Opening,
}

/// Whether a new sale's orders go to the orders' database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streaming {
    /// Yes: the instance has `--orders-db`; each shard gets its stream and group if it has
    /// none.
    Streamed,
    /// As before: streamed if the product's streams exist (a reset by an instance with
    /// `--orders-db` made them), so once a product's orders are streamed, they stay so.
    AsBefore,
    /// No, this sale keeps its orders in Redis only (what the database costs is measured
    /// against it); what waits in the streams still drains.
    Off,
}

/// Tags for `shards` shards that go round-robin over `masters`: shard `i` on master
/// `i mod M`. The plain tag `101/i` is kept when its slot is already there; otherwise the
/// first of `101/i.1`, `101/i.2`, … that is (about M tries each). With one master (a
/// standalone Redis) every plain tag qualifies, so nothing changes there.
pub fn place(masters: &[Master], product: &ProductId, shards: u32) -> Layout {
    if masters.len() <= 1 {
        return Layout::plain(product, shards);
    }
    let tags = (0..shards)
        .map(|index| {
            let target = &masters[index as usize % masters.len()];
            (0..MAX_PLACEMENT_TRIES)
                .map(|attempt| shard_tag(product, index, attempt))
                .find(|tag| target.serves(key_slot(tag.as_bytes())))
                .unwrap_or_else(|| shard_tag(product, index, 0))
        })
        .collect();
    Layout::from_tags(product, tags).unwrap_or_else(|| Layout::plain(product, shards))
}

/// Candidates tried per shard before giving up on its master (a master with almost no
/// slots); the shard then keeps its plain tag, wherever that lands.
const MAX_PLACEMENT_TRIES: u32 = 100_000;

/// Deletes every lock of a product, whoever holds them, and wakes their waiters: the
/// operator's way out of a setnx deadlock. Returns how many locks were held.
pub async fn force_unlock(
    store: &Store,
    locks: &Store,
    product: &ProductId,
) -> Result<u32, AppError> {
    let layout = layout(store, product).await?;
    let keys = ProductKeys::new(product);
    let conn = locks.conn();
    let freed = try_join_all((0..layout.shards()).map(|index| {
        let keys = keys.shard(&layout, index).lock_keys();
        let mut conn = conn.clone();
        async move { seckill_lock::inspect::force_release(&mut conn, &keys).await }
    }))
    .await?;
    Ok(freed.into_iter().map(u32::from).sum())
}

/// The number of the product's current sale (its last reset), or `UnknownProduct`.
pub async fn epoch(store: &Store, product: &ProductId) -> Result<i64, AppError> {
    let keys = ProductKeys::new(product);
    let epoch: Option<i64> = store.conn().hget(&keys.meta, "epoch").await?;
    epoch.ok_or_else(|| AppError::UnknownProduct(product.to_string()))
}

/// Numbers an unsplit product's current sale `epoch` (the database numbered it: see
/// `Database::reset_stock`).
pub async fn set_epoch(store: &Store, product: &ProductId, epoch: i64) -> Result<(), AppError> {
    let keys = ProductKeys::new(product);
    let whole = keys.whole();
    redis::pipe()
        .hset(&keys.meta, "epoch", epoch)
        .ignore()
        .hset(&whole.audit, "epoch", epoch)
        .ignore()
        .query_async::<()>(&mut store.conn())
        .await?;
    Ok(())
}

/// Where the shards of a product that was reset live, or `UnknownProduct`.
pub async fn layout(store: &Store, product: &ProductId) -> Result<Layout, AppError> {
    recorded_layout(store, product)
        .await?
        .ok_or_else(|| AppError::UnknownProduct(product.to_string()))
}

pub(crate) async fn recorded_layout(
    store: &Store,
    product: &ProductId,
) -> Result<Option<Layout>, AppError> {
    let keys = ProductKeys::new(product);
    let (shards, tags): (Option<u32>, Option<String>) = redis::cmd("HMGET")
        .arg(&keys.meta)
        .arg("shards")
        .arg("tags")
        .query_async(&mut store.conn())
        .await?;
    Ok(shards.map(|n| Layout::from_meta(product, n.clamp(1, MAX_SHARDS), tags.as_deref())))
}

/// The units left, summed over shards, and per shard (units in instances' shares count).
pub async fn remaining(store: &Store, product: &ProductId) -> Result<(i64, Vec<i64>), AppError> {
    let layout = layout(store, product).await?;
    let keys = ProductKeys::new(product);
    let conn = store.conn();
    let per_shard: Vec<i64> = try_join_all((0..layout.shards()).map(|index| {
        let shard = keys.shard(&layout, index);
        let mut conn = conn.clone();
        async move {
            let (stock, in_shares): (Option<i64>, Vec<i64>) = redis::pipe()
                .get(&shard.stock)
                .hvals(&shard.shares)
                .query_async(&mut conn)
                .await?;
            Ok::<_, redis::RedisError>(stock.unwrap_or_default() + in_shares.iter().sum::<i64>())
        }
    }))
    .await?;
    Ok((per_shard.iter().sum(), per_shard))
}

/// Each shard's stock key, one `GET` per shard (each on its own slot), all at once.
pub async fn shard_stocks(
    store: &Store,
    product: &ProductId,
    layout: &Layout,
) -> Result<Vec<Option<i64>>, AppError> {
    let keys = ProductKeys::new(product);
    let conn = store.conn();
    Ok(try_join_all((0..layout.shards()).map(|index| {
        let stock = keys.shard(layout, index).stock;
        let mut conn = conn.clone();
        async move { conn.get::<_, Option<i64>>(stock).await }
    }))
    .await?)
}
