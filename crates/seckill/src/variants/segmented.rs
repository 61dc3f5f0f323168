//! `segmented` — the stock is split into shards, each under its own watchdog lock.
//!
//! A request starts at a shard picked at random among those with stock, and moves to the
//! next when one turns out empty. Sold out (409) only when every shard is empty, so there
//! is no false sold-out while any shard still has stock. N shards let N holders work at
//! once: close to N times the goodput of `watchdog` when the critical section dominates.
//!
//! A per-user limit cannot be checked inside a shard's critical section: the buyer's count
//! lives on the product's slot, the shard elsewhere. So the unit is reserved first
//! (`lua/reserve.lua`), and given back when no shard sold it — when that is known: a sale
//! whose answer was lost is looked up first (`lost::learn`), and until it is, the
//! reservation stays.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::{Deduction, Outcome, Spec, lost, watchdog};
use crate::error::AppError;
use crate::keys::Layout;
use crate::scripts::Reply;
use crate::{product, scripts};

pub static SPEC: Spec = Spec {
    name: "segmented",
    summary: "the stock split into shards, each under its own watchdog lock: N holders at once",
    color: "#2e7d32",
    knobs: watchdog::KNOBS,
    in_progression: true,
    splits_stock: true,
    whole_stock: false,
    stock_in_database: false,
    must_finish: true,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
};

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let store = &d.app.store;
    let layout = product::layout(store, &d.product.product).await?;
    // A look at every shard without locks: stock only ever goes down, so a shard seen
    // empty is empty, and nobody queues for its lock.
    let stocks = product::shard_stocks(store, &d.product.product, &layout).await?;
    if stocks.iter().all(Option::is_none) {
        return Err(d.not_for_sale().await);
    }
    let with_stock: Vec<u32> = (0..layout.shards())
        .zip(&stocks)
        .filter(|(_, stock)| stock.is_some_and(|s| s > 0))
        .map(|(index, _)| index)
        .collect();
    if with_stock.is_empty() {
        return Ok(Outcome::SoldOut { remaining: 0 });
    }

    // A buyer's units are counted on the product's slot, the stock on the shards': the
    // unit is reserved first, and given back once it is known that no shard sold it.
    // A take whose answer is lost may have reserved: reserved until known otherwise.
    let reserving = layout.shards() > 1;
    d.reserved.store(reserving, Ordering::Relaxed);
    let taken = if reserving {
        reserve(d).await
    } else {
        Ok(Reply::Units(0))
    };
    let outcome = match taken {
        // Reserved (1), or nothing to reserve (0: no limit).
        Ok(Reply::Units(reserved)) => {
            if reserved == 0 {
                d.reserved.store(false, Ordering::Relaxed);
            }
            lost::learn(d, sell(d, &layout, &with_stock).await).await
        }
        Ok(Reply::Refused(why)) => {
            d.reserved.store(false, Ordering::Relaxed);
            return d.refused(why).await;
        }
        Err(err) => Err(err),
    };
    let sold_nothing = match &outcome {
        Ok(Outcome::Deducted { .. } | Outcome::Unconfirmed { .. } | Outcome::Unknown { .. }) => {
            false
        }
        // Learnt: an error here is one after which no sale can run.
        Ok(_) | Err(_) => true,
    };
    if sold_nothing
        && d.reserved.load(Ordering::Relaxed)
        && let Err(err) = lost::give_back(&d.app, &d.product, &d.holder).await
    {
        tracing::warn!(
            error = %err,
            user = d.user(),
            "a reservation no sale used was not given back: trying again until Redis answers"
        );
        lost::give_back_later(d.app.clone(), d.product.clone(), d.holder.to_string());
    }
    outcome
}

/// `lua/reserve.lua` for this deduction's buyer: one unit, under the holder's id, noted in
/// the idempotency key's claim when the request has one. The record of it is kept as long
/// as a repeat of the request may take the claim over, or for [`RESERVATION_KEPT`].
async fn reserve(d: &Deduction) -> Result<Reply, AppError> {
    let (claim, keep) = match &d.claim {
        Some(claim) => (claim.record().to_owned(), d.app.settings.idempotency_ttl),
        // The claim of no key: a name never written.
        None => (d.product.whole().claim(""), RESERVATION_KEPT),
    };
    Ok(
        scripts::reserve(&d.product, &d.holder, d.user(), &claim, keep)
            .invoke_async(&mut d.redis())
            .await?,
    )
}

/// How long the record of an unkeyed request's reservation is kept: well past the time it
/// takes to look its sale up ([`super::SETTLE_FOR`]).
const RESERVATION_KEPT: Duration = Duration::from_secs(600);

/// One unit from the first of `with_stock`'s shards (in a random turn) that sells one.
async fn sell(d: &Deduction, layout: &Layout, with_stock: &[u32]) -> Result<Outcome, AppError> {
    let start = fastrand::usize(..with_stock.len());
    let deadline = Instant::now() + d.knobs.wait();
    let mut busy = false;
    for k in 0..with_stock.len() {
        let shard = d
            .product
            .shard(layout, with_stock[(start + k) % with_stock.len()]);
        let wait = deadline.saturating_duration_since(Instant::now());
        match watchdog::deduct_from(d, &shard, wait).await? {
            // Emptied since the look: on to the next shard.
            Outcome::SoldOut { .. } => {}
            Outcome::LockBusy => busy = true,
            outcome => return Ok(outcome),
        }
    }
    Ok(if busy {
        Outcome::LockBusy
    } else {
        Outcome::SoldOut { remaining: 0 }
    })
}
