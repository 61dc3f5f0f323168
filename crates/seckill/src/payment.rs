//! Payment or expiry: a sale with a payment window is a reservation.
//!
//! A reset may give a sale `pay_within_ms`. Every sale's script then also adds its order to
//! its shard's `unpaid` sorted set, scored by the time it must be paid by. From there an
//! order leaves exactly once, by one of two scripts on the shard's slot:
//!
//! - [`pay`] (`lua/pay.lua`, `POST /orders/{id}/pay`): before the deadline, the order is
//!   paid and keeps its unit; after it, the payment finds it expired — expiring it on the
//!   spot if no sweep has yet, so the answer never depends on how late a sweep runs.
//! - [`Sweeper`] (`lua/expire.lua`): every instance, every `--expiry-sweep-ms`, expires the
//!   reservations whose time ran out: the unit goes back to the stock it came from (its
//!   shard, or the pool of `shares`) and the buyer's slot is freed.
//!
//! The two cannot interleave (Redis runs one script at a time per slot), so a payment
//! racing the expiry either wins, or is answered 410 `expired` — never both. The expiry
//! needs no timer process of its own: the deadlines are in Redis, any instance sweeps
//! them, and a sweep that dies half-way leaves the rest for the next. The audit's
//! invariant becomes `initial = remaining + reserved + paid`.
//!
//! One step is not atomic: a split product's per-user reservations live on the product's
//! slot, apart from the shards, so an expired order's buyer gets that reservation back in a
//! second call. The expiry notes what it owes in the shard (`owed`), in the same step; the
//! give-back happens once per order (`lua/reserve.lua`'s `return`, whose mark stands until
//! the note is struck), and only then is the note struck: an answer lost, or an instance
//! that dies between the two, leaves the note for the next sweep of any instance, never a
//! buyer one unit short or one over — however long the strike keeps failing.

use std::time::Duration;

use futures_util::future::try_join_all;
use redis::{AsyncCommands, Value};

use crate::error::AppError;
use crate::keys::{ProductId, ProductKeys, ShardKeys, UNPAID_SETS, shard_of_unpaid};
use crate::orders::entries::{integer, text};
use crate::product;
use crate::scripts::{self, PayReply};
use crate::store::Store;

/// What a payment came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paid {
    /// Paid now: the unit is the buyer's.
    Now,
    /// Paid by an earlier request: nothing changed.
    Before,
}

/// Pays for `order` of `product`: `Paid`, or `Expired` (410), `NotReserved` (409: sold
/// with no payment window), `UnknownOrder` (404).
pub async fn pay(store: &Store, product: &ProductId, order: &str) -> Result<Paid, AppError> {
    let layout = product::layout(store, product).await?;
    let keys = ProductKeys::new(product);
    let conn = store.conn();
    let split = layout.shards() > 1;
    // Each shard is asked at once; only the one that sold the order does anything.
    let answers: Vec<PayReply> = try_join_all((0..layout.shards()).map(|index| {
        let shard = keys.shard(&layout, index);
        let mut conn = conn.clone();
        async move {
            scripts::pay(&shard, split, order)
                .invoke_async(&mut conn)
                .await
        }
    }))
    .await?;
    for (index, answer) in (0..).zip(answers) {
        match answer {
            PayReply::Paid => return Ok(Paid::Now),
            PayReply::PaidBefore => return Ok(Paid::Before),
            PayReply::Expired { owed } => {
                // Its unit may have gone back just now: no instance's sold-out flag
                // stands.
                crate::admission::notify(store, product).await;
                if split && let Some(buyer) = owed {
                    // Owed, and noted: when this fails, the sweep gives it back.
                    let shard = keys.shard(&layout, index);
                    give_back(store, &keys, &shard, order, &buyer).await?;
                }
                return Err(AppError::Expired(order.to_owned()));
            }
            PayReply::NotReserved => return Err(AppError::NotReserved(order.to_owned())),
            PayReply::NotHere => {}
        }
    }
    Err(AppError::UnknownOrder(order.to_owned()))
}

/// A split product's per-user reservation of `buyer`'s, given back for expired order
/// `order`, once (`lua/reserve.lua`), and then struck from what `shard` owes.
async fn give_back(
    store: &Store,
    keys: &ProductKeys,
    shard: &ShardKeys,
    order: &str,
    buyer: &str,
) -> Result<(), AppError> {
    let mut conn = store.conn();
    let _: i64 = scripts::return_expired(keys, order, buyer)
        .invoke_async(&mut conn)
        .await?;
    let _: i64 = conn.hdel(&shard.owed, order).await?;
    // Struck: the once-per-order mark may go in a while (a sweep that read the note before
    // the strike may still be giving it back; it finds the mark).
    let mark = scripts::expired_mark(keys, order);
    let _: bool = conn.pexpire(&mark, MARK_KEPT_MS).await?;
    Ok(())
}

/// How long the once-per-order mark of a unit given back stays after its debt is struck.
const MARK_KEPT_MS: i64 = 600_000;

/// Expires the reservations whose time to pay ran out, on every instance.
pub struct Sweeper {
    pub store: Store,
    /// How often: `--expiry-sweep-ms`.
    pub every: Duration,
}

/// Orders one `expire.lua` call expires at most (a shard with more due is called again).
const BATCH: usize = 200;
/// The registry of `unpaid` sets is read again this often (a reset adds its product's).
const REFRESH: Duration = Duration::from_secs(1);
/// After a failed sweep (Redis away, a Cluster failing over), the next waits this long.
const BACKOFF: Duration = Duration::from_secs(1);

impl Sweeper {
    /// Sweeps until the process ends. A sweep that fails (Redis away) is tried again after
    /// a pause; nothing is lost meanwhile, the deadlines are in Redis.
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(self.every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut sets: Vec<String> = Vec::new();
            let mut refreshed: Option<tokio::time::Instant> = None;
            let mut failing = false;
            loop {
                tick.tick().await;
                let result = async {
                    if refreshed.is_none_or(|at| at.elapsed() >= REFRESH) {
                        sets = redis::cmd("SMEMBERS")
                            .arg(UNPAID_SETS)
                            .query_async(&mut self.store.conn())
                            .await?;
                        refreshed = Some(tokio::time::Instant::now());
                    }
                    self.sweep(&sets).await
                }
                .await;
                match result {
                    Ok(_) if failing => {
                        failing = false;
                        tracing::info!("expiry sweeps work again");
                    }
                    Ok(_) => {}
                    Err(err) => {
                        if !failing {
                            tracing::warn!(error = %err, "expiry sweep failed; trying again every second");
                        }
                        failing = true;
                        tokio::time::sleep(BACKOFF).await;
                    }
                }
            }
        })
    }

    /// One sweep over `sets` (`unpaid` sets): how many orders it expired.
    pub async fn sweep(&self, sets: &[String]) -> Result<usize, AppError> {
        let mut conn = self.store.conn();
        let mut expired = 0;
        for set in sets {
            let Some((product, split, shard)) = shard_of_unpaid(set) else {
                continue;
            };
            loop {
                let answer: Vec<Value> = scripts::expire(&shard, split, BATCH)
                    .invoke_async(&mut conn)
                    .await?;
                let now = answer.first().and_then(integer).unwrap_or(0);
                expired += usize::try_from(now).unwrap_or(0);
                if now > 0 {
                    // Units are back: every instance forgets the product was sold out.
                    crate::admission::notify(&self.store, &product).await;
                }
                let keys = ProductKeys::new(&product);
                for owed in answer.get(1..).unwrap_or_default().chunks_exact(2) {
                    if let (Some(order), Some(buyer)) = (text(&owed[0]), text(&owed[1])) {
                        give_back(&self.store, &keys, &shard, &order, &buyer).await?;
                    }
                }
                if now < BATCH as i64 {
                    break;
                }
            }
        }
        Ok(expired)
    }
}
