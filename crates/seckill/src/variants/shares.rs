//! `shares` — the end of seed 000: "split the stock into ten shares; each server holds one,
//! and takes a new share when it has used its own up" (分成10份，每个服务器持有一份，用完再去获取新的份额).
//!
//! An instance takes a share of the pool in one atomic script, then sells it under a
//! local lock — a mutex in the process, no Redis lock at all — and takes the next when
//! it runs out. Every sale is still an order in Redis (one script, outside the local
//! lock, so the instance's sales share Redis's round trips) before it is answered 200.
//!
//! Sold out (409) only when the pool and every share are empty. When the pool is empty but
//! other instances' shares still hold units, a request waits (up to `wait_ms`) and is 429
//! if none come free. A share carries a lease that each sale renews: when an instance dies
//! (or sells nothing for a lease), the next take of a share gives its unsold units back to
//! the pool, so a buyer waits at most one lease (`--share-lease-ms`) for a dead instance's
//! units.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::section;
use super::{Deduction, Outcome, Spec, Start};
use crate::error::AppError;
use crate::keys::ProductId;
use crate::knobs::{DEFAULT_LOCK_WAIT_MS, Kind, Knob, WAIT_MS, WORK_MS};
use crate::product::MAX_STOCK;
use crate::scripts;
use crate::scripts::{Refusal, Reply};

/// `share_units`: units an instance takes at a time.
pub const SHARE_UNITS: Knob = Knob {
    name: "share_units",
    doc: "shares: units an instance takes from the pool at a time (default: a tenth of \
          the initial stock, the seed's ten shares).",
    kind: Kind::Count {
        min: 1,
        max: MAX_STOCK,
    },
};

pub static SPEC: Spec = Spec {
    name: "shares",
    summary: "each instance takes a share of the stock and sells it under a lock in its own process",
    color: "#ad1457",
    knobs: &[
        WORK_MS,
        WAIT_MS.defaulting_to(DEFAULT_LOCK_WAIT_MS),
        SHARE_UNITS,
    ],
    in_progression: true,
    splits_stock: false,
    whole_stock: false,
    stock_in_database: false,
    must_finish: true,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
};

/// How often a request whose units all sit in other instances' shares looks at the pool
/// again: a share whose lease ran out gives its units back to it (or they sell there, and
/// the product is sold out).
const POOL_POLL: Duration = Duration::from_millis(50);

/// No shares yet: each is taken when a product is first sold here.
pub(super) fn start(start: &Start<'_>) -> Shares {
    Shares::new(start.share_lease)
}

/// This instance's shares, one per product, each behind its local lock.
pub struct Shares {
    /// A std Mutex around the map, held only to find or add a product's share.
    by_product: Arc<Mutex<HashMap<ProductId, Arc<tokio::sync::Mutex<Share>>>>>,
    lease: Duration,
}

/// The share this instance holds of one product.
#[derive(Default)]
struct Share {
    /// The held share's id in Redis (its lease's too), and its units not yet taken here.
    held: Option<(String, i64)>,
}

impl Shares {
    /// `lease`: how long a share outlives its last sale (`--share-lease-ms`).
    fn new(lease: Duration) -> Self {
        Self {
            by_product: Arc::default(),
            lease,
        }
    }

    fn of(&self, product: &ProductId) -> Arc<tokio::sync::Mutex<Share>> {
        let mut shares = self.by_product.lock().unwrap_or_else(|e| e.into_inner());
        shares.entry(product.clone()).or_default().clone()
    }
}

/// What a turn at the local lock came to.
enum Turn {
    /// A unit taken from the held share `id`, to be recorded in Redis.
    Unit {
        id: String,
    },
    SoldOut,
    /// Nothing free: the units left sit in other instances' shares.
    Elsewhere,
}

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shares = &d.app.variant_state.shares;
    let shard = d.whole_stock();
    let share = shares.of(&d.product.product);
    let deadline = Instant::now() + d.knobs.wait();
    loop {
        let taken = {
            // The seed's local lock: one sale of this instance's share at a time.
            let Ok(mut share) = tokio::time::timeout_at(deadline, share.lock()).await else {
                return Ok(Outcome::LockBusy);
            };
            take(d, shares, &mut share).await?
        };
        match taken {
            Turn::SoldOut => return Ok(Outcome::SoldOut { remaining: 0 }),
            Turn::Elsewhere if Instant::now() + POOL_POLL >= deadline => {
                return Ok(Outcome::LockBusy);
            }
            Turn::Elsewhere => tokio::time::sleep(POOL_POLL).await,
            Turn::Unit { id } => {
                let order = Uuid::now_v7().to_string();
                let sale = d.sale(&shard, &order);
                let reply: Reply = scripts::share_sell(&sale, &id, shares.lease)
                    .invoke_async(&mut d.redis())
                    .await?;
                d.lost.answered();
                let why = match reply {
                    // As every sale: a 200 once as many replicas as asked for have it.
                    Reply::Units(left) => return Ok(d.sold(&shard, order, left).await),
                    Reply::Refused(why) => why,
                };
                if why != Refusal::ShareGone {
                    // Not sold: the unit goes back into the share it was taken from.
                    let mut share = share.lock().await;
                    if let Some((held, units)) = share.held.as_mut()
                        && *held == id
                    {
                        *units += 1;
                    }
                    return d.refused(why).await;
                }
                // The share's lease ran out before this sale reached Redis (or a reset
                // cleared it): its units went back to the pool, and this one with them.
                let mut share = share.lock().await;
                if share.held.as_ref().is_some_and(|(held, _)| *held == id) {
                    share.held = None;
                }
                if Instant::now() >= deadline {
                    return Ok(Outcome::LockBusy);
                }
            }
        }
    }
}

/// Under the local lock: a unit from this instance's share, taking a new share first
/// when it is used up, with the seed's work in between.
async fn take(d: &Deduction, shares: &Shares, share: &mut Share) -> Result<Turn, AppError> {
    if share.held.as_ref().is_none_or(|(_, left)| *left <= 0) {
        let shard = d.whole_stock();
        let id = format!("{}/{}", d.app.settings.instance, Uuid::new_v4());
        let units = d.knobs.count(&SHARE_UNITS).unwrap_or(0);
        let (taken, elsewhere): (Option<i64>, i64) =
            scripts::share_take(&shard, &d.product.meta, &id, units, shares.lease)
                .invoke_async(&mut d.redis())
                .await?;
        share.held = None;
        match taken {
            None => return Err(d.not_for_sale().await),
            Some(0) if elsewhere > 0 => return Ok(Turn::Elsewhere),
            Some(0) => return Ok(Turn::SoldOut),
            Some(units) => share.held = Some((id, units)),
        }
    }
    let Some((id, left)) = share.held.as_mut() else {
        return Ok(Turn::SoldOut);
    };
    section::work(d).await;
    *left -= 1;
    Ok(Turn::Unit { id: id.clone() })
}
