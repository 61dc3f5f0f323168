//! A reset: a new sale of a product — its stock set, its orders, buyers, reservations,
//! audit and locks cleared, shard by shard, then its meta.

use std::time::Duration;

use futures_util::future::try_join_all;
use redis::AsyncCommands;

use super::{Streaming, Terms, epoch, place, recorded_layout, set_epoch};
use crate::admission;
use crate::database::Database;
use crate::error::AppError;
use crate::keys::{Layout, ORDER_STREAMS, ProductId, ProductKeys, ShardKeys, UNPAID_SETS};
use crate::store::{RedisConn, Store};

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
    key_ttl: Duration,
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
        key_ttl,
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
    /// How long an idempotency key is kept (`--idempotency-ttl-s`): a shard's record of
    /// the order sold under a key (`keys`) counts for as long, then a reuse of the key is
    /// a new request.
    key_ttl: Duration,
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
                // The buyer's limit where `deduct.lua` reads the terms, in one read: the
                // product's on its whole shard; a split product's is checked before its
                // shards (`reserve.lua`), as its shards' meta key says (none).
                (
                    "per_user",
                    if terms.shards <= 1 { terms.per_user } else { 0 },
                ),
                (
                    "key_ttl_ms",
                    i64::try_from(sale.key_ttl.as_millis()).unwrap_or(i64::MAX),
                ),
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
    key_ttl: Duration,
) -> Result<Layout, AppError> {
    if terms.in_database && db.is_none() {
        return Err(AppError::NotConfigured(
            "stock_in postgres needs PostgreSQL: start the instance with --orders-db".into(),
        ));
    }
    let layout = reset(store, locks, product, terms, streaming, key_ttl).await?;
    let Some(db) = db else {
        return Ok(layout);
    };
    // A reset clears the product's locks: pg_unique's row too. (A sale in Redis does not
    // wait for the database: a row left while it is away stays until the next reset.)
    let lock = ProductKeys::new(product).whole().lock.clone();
    let cleared = crate::database::locks::force_unlock(db, &lock).await;
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
