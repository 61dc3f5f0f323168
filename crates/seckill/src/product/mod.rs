//! Product-level operations: setting the stock (reset), where a product's shards live,
//! its locks forced free, and (`audit`) the audit behind `/stats`.

mod audit;
mod stats;

pub use audit::{recorded_orders, settled_orders, stats};
pub use stats::{LockView, Reconciliation, Stats};

use futures_util::future::try_join_all;
use redis::AsyncCommands;

use crate::admission::{self, Opening};
use crate::database::Database;
use crate::error::AppError;
use crate::keys::{
    Layout, ORDER_STREAMS, ProductId, ProductKeys, ShardKeys, UNPAID_SETS, shard_tag,
};
use crate::store::{Master, RedisConn, Store, key_slot};

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

/// Sets a product's stock as `terms` say, and clears its orders, buyers, reservations,
/// audit and locks. Every reset starts a new sale, numbered by the meta's `epoch` (kept in
/// each shard's audit too, with the payment window and whether its orders are streamed,
/// for the sale scripts). `streaming` says whether its orders are streamed to the
/// database: a streamed shard has an orders stream and its consumer group, listed in
/// [`ORDER_STREAMS`]; a stream is never cleared by a reset (what waits there for the
/// database outlives it). With a payment
/// window, each shard's `unpaid` set is listed in [`UNPAID_SETS`] for the sweepers.
///
/// On a Cluster the shards are placed round-robin over the masters (see [`place`]). Each
/// shard is cleared and set in one `MULTI` on its own slot, all shards at once; the meta
/// (initial stock, shard count, tags) is written last, on the product's slot. Nothing
/// spans slots, so a reset is atomic per shard, not across them: a deduction that races
/// a reset finds its shard either before or after it, never half-set.
pub async fn reset(
    store: &Store,
    locks: &Store,
    product: &ProductId,
    terms: Terms,
    streaming: Streaming,
) -> Result<Layout, AppError> {
    let keys = ProductKeys::new(product);
    // A new sale: idempotency keys claimed before it no longer answer for it, and its
    // orders carry its number.
    let epoch: i64 = store.conn().hincr(&keys.meta, "epoch", 1).await?;
    let old = recorded_layout(store, product).await?;
    let new = if terms.shards <= 1 {
        Layout::unsplit(product)
    } else {
        place(&store.masters().await?, product, terms.shards)
    };
    let sale = NewSale {
        epoch,
        terms,
        streaming,
    };
    let clear = shards_to_clear(&keys, &new, old, terms.stock);
    let (conn, lock_conn) = (store.conn(), locks.conn());
    try_join_all(
        clear.iter().map(|(shard, units)| {
            reset_shard(conn.clone(), lock_conn.clone(), shard, *units, &sale)
        }),
    )
    .await?;
    write_meta(store, &keys, &new, &sale).await?;
    if streaming == Streaming::Streamed {
        let streams: Vec<String> = (0..new.shards())
            .map(|index| keys.shard(&new, index).stream)
            .collect();
        let _: i64 = store.conn().sadd(ORDER_STREAMS, &streams).await?;
    }
    // Every instance forgets the sale's old terms and its sold-out flag.
    admission::notify(store, product).await;
    Ok(new)
}

/// What a reset writes into each shard of the new sale.
struct NewSale {
    epoch: i64,
    terms: Terms,
    streaming: Streaming,
}

/// The shards a reset clears: the new layout's (each with its share of `stock`), and the
/// unsplit layout's and the `old` split's that the new one does not reuse (`None`: cleared,
/// no stock).
fn shards_to_clear(
    keys: &ProductKeys,
    new: &Layout,
    old: Option<Layout>,
    stock: i64,
) -> Vec<(ShardKeys, Option<i64>)> {
    let shards = i64::from(new.shards());
    let mut clear: Vec<(ShardKeys, Option<i64>)> = Vec::new();
    for index in 0..new.shards() {
        let units = stock / shards + i64::from(i64::from(index) < stock % shards);
        clear.push((keys.shard(new, index), Some(units)));
    }
    for layout in [Some(Layout::unsplit(&keys.product)), old].iter().flatten() {
        for index in 0..layout.shards() {
            let shard = keys.shard(layout, index);
            if !clear.iter().any(|(c, _)| c.stock == shard.stock) {
                clear.push((shard, None));
            }
        }
    }
    clear
}

/// One shard cleared in one `MULTI` on its slot and, when it is the new sale's (`units`),
/// set: its stock, the sale's terms in its audit, its orders stream, its unpaid set
/// listed for the sweepers; its lock deleted in the lock store.
async fn reset_shard(
    mut conn: RedisConn,
    mut lock_conn: RedisConn,
    shard: &ShardKeys,
    units: Option<i64>,
    sale: &NewSale,
) -> Result<(), AppError> {
    let terms = &sale.terms;
    // Streamed: this instance streams, or an earlier reset made the stream.
    let streamed = units.is_some()
        && match sale.streaming {
            Streaming::Streamed => true,
            Streaming::AsBefore => conn.exists::<_, bool>(&shard.stream).await?,
            Streaming::Off => false,
        };
    if sale.streaming == Streaming::Streamed && units.is_some() {
        create_stream(&mut conn, &shard.stream).await?;
    }
    let mut pipe = redis::pipe();
    pipe.atomic().del(&shard.stock_side()[..]).ignore();
    if let Some(units) = units {
        if !terms.in_database {
            pipe.set(&shard.stock, units).ignore();
        }
        pipe.hset_multiple(
            &shard.audit,
            &[
                ("epoch", sale.epoch),
                ("streamed", i64::from(streamed)),
                ("pay_within_ms", terms.pay_within_ms),
                ("trace", i64::from(terms.trace)),
            ],
        )
        .ignore();
    }
    pipe.query_async::<()>(&mut conn).await?;
    if units.is_some() && terms.pay_within_ms > 0 {
        conn.sadd::<_, _, ()>(UNPAID_SETS, &shard.unpaid).await?;
    } else {
        conn.srem::<_, _, ()>(UNPAID_SETS, &shard.unpaid).await?;
    }
    lock_conn.del::<_, ()>(&shard.lock_side()[..]).await?;
    Ok(())
}

/// The meta of the new sale, last, on the product's slot: its stock, shards, tags, limit,
/// payment window, where the stock lives, and the door's terms — every field, so that none
/// of an earlier sale's stays, with a fresh key, so that no ticket or pass of an earlier
/// sale is good in this one.
async fn write_meta(
    store: &Store,
    keys: &ProductKeys,
    new: &Layout,
    sale: &NewSale,
) -> Result<(), AppError> {
    let terms = &sale.terms;
    let door_fields = terms
        .door
        .meta_fields(admission::wall_clock_ms(), &room_key()?);
    let mut pipe = redis::pipe();
    pipe.atomic()
        // (The product's audit hash is its unsplit shard's, cleared with the shards.)
        .del(&keys.reserved)
        .ignore()
        .del(&[keys.room_counter(), keys.room_buyers()][..])
        .ignore()
        .hset_multiple(&keys.meta, &door_fields)
        .ignore()
        .hset_multiple(
            &keys.meta,
            &[
                ("initial", terms.stock.to_string()),
                ("shards", terms.shards.to_string()),
                ("tags", new.to_meta()),
                ("per_user", terms.per_user.to_string()),
                ("pay_within_ms", terms.pay_within_ms.to_string()),
                (
                    "stock_in",
                    if terms.in_database {
                        "postgres"
                    } else {
                        "redis"
                    }
                    .to_owned(),
                ),
            ],
        )
        .ignore();
    if terms.shards > 1 {
        // A split product's request counters (its own audit hash) know the sale too.
        pipe.hset(&keys.audit, "epoch", sale.epoch).ignore();
    }
    pipe.query_async::<()>(&mut store.conn()).await?;
    Ok(())
}

/// A waiting room's signing key: 32 bytes from the operating system's generator.
fn room_key() -> Result<String, AppError> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|err| {
        AppError::Internal(anyhow::anyhow!(
            "the system's random generator failed: {err}"
        ))
    })?;
    Ok(admission::terms::hex(&key))
}

/// [`reset`], and then the database's part of it: the product's lock row cleared (as the
/// reset clears its locks in Redis); with `terms.in_database`, the stock's
/// row set in `db` under the sale's number (which the database may move on past numbers
/// it has seen: `Database::reset_stock`); otherwise any row the product had there
/// forgotten, best effort (the `pg_*` stock variants sell only a row of the sale Redis's
/// meta names, in postgres, so a row left behind sells for no one).
pub async fn reset_with_database(
    store: &Store,
    locks: &Store,
    db: Option<&Database>,
    product: &ProductId,
    terms: Terms,
    streaming: Streaming,
) -> Result<Layout, AppError> {
    if terms.in_database && db.is_none() {
        return Err(AppError::NotConfigured(
            "stock_in postgres needs PostgreSQL: start the instance with --orders-db".into(),
        ));
    }
    let layout = reset(store, locks, product, terms, streaming).await?;
    let Some(db) = db else {
        return Ok(layout);
    };
    // A reset clears the product's locks: pg_unique's row too. (A sale in Redis does not
    // wait for the database: a row left while it is away stays until the next reset.)
    let cleared = db
        .force_unlock(&ProductKeys::new(product).whole().lock)
        .await;
    if let Err(err) = cleared {
        if terms.in_database {
            return Err(err);
        }
        tracing::warn!(%product, error = %err, "the product's pg_unique lock row is left");
    }
    if terms.in_database {
        let epoch = epoch(store, product).await?;
        let used = db.reset_stock(product.as_str(), epoch, terms.stock).await?;
        if used != epoch {
            set_epoch(store, product, used).await?;
        }
    } else if let Err(err) = db.forget_stock(product.as_str()).await {
        tracing::warn!(%product, error = %err, "the stock's old row is left in the database");
    }
    Ok(layout)
}

/// A shard's orders stream and its consumer group, unless they exist.
async fn create_stream(
    conn: &mut crate::store::RedisConn,
    stream: &str,
) -> Result<(), redis::RedisError> {
    let created: Result<(), redis::RedisError> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(crate::keys::ORDERS_GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(conn)
        .await;
    match created {
        Err(err) if err.code() != Some("BUSYGROUP") => Err(err),
        _ => Ok(()),
    }
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
            let (stock, claimed): (Option<i64>, Vec<i64>) = redis::pipe()
                .get(&shard.stock)
                .hvals(&shard.claims)
                .query_async(&mut conn)
                .await?;
            Ok::<_, redis::RedisError>(stock.unwrap_or_default() + claimed.iter().sum::<i64>())
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
