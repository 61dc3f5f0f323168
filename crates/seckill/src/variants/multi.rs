//! `multi` — a cart of several products, one unit each, all or nothing, under Redisson's
//! MultiLock (the lock crate's `MultiLock`): every product's watchdog lock, taken one after
//! another within one wait.
//!
//! `products=101,102,103` is the cart. The locks are taken in `lock_order`: `sorted` (the
//! default: one global order, seed 000's rule 7) or `given` (the request's order). When a
//! lock is not had before the wait runs out, the ones already taken are given back and the
//! cart is answered 429 — nothing sold. With all the locks held, every product's stock is
//! read; if one is out, the cart is answered 409 and nothing is sold; otherwise each
//! product's unit is taken and its order recorded, and the locks are given back.
//!
//! The lesson: carts `101,102` and `102,101` at once with `lock_order=given`. One holds 101
//! and waits for 102, the other holds 102 and waits for 101 — a deadlock that only the wait
//! breaks: both give up, units stay unsold while buyers are turned away, and the time spent
//! waiting is lost. `/stats` counts it per product (`multi`). With `sorted`, both take 101
//! first; one waits for the other to finish, and the deadlock cannot happen.
//!
//! A cart is sold product by product (on a Cluster the products live on different slots,
//! so no one script can take them all); everything that could refuse a line — its stock,
//! the buyer's limit — is checked under the locks first, and a line refused after others
//! were taken anyway — a buyer's limit reached through a variant that takes no lock, a lock
//! lost — is counted as `multi.half_sold`.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use seckill_lock::{Lock, MultiLock};
use tokio::time::Instant;
use uuid::Uuid;

use super::holding::Holding;
use super::lost;
use super::section::{self, INSIDE_MARGIN};
use super::{Deduction, Outcome, Spec};
use crate::admission::wall_clock_ms;
use crate::error::AppError;
use crate::keys::{ProductKeys, ShardKeys, key_record};
use crate::knobs::{DEFAULT_LOCK_WAIT_MS, Kind, Knob, WAIT_MS, WORK_MS};
use crate::outcome::Counter;
use crate::outcome::sale::{self, Taken};
use crate::scripts;
use crate::scripts::{Credentials, Refusal, Reply, StockWrite};

/// The most products one cart holds.
pub const MAX_CART: usize = 8;

/// `products`: the cart.
pub const PRODUCTS: Knob = Knob {
    name: "products",
    doc: "multi: the cart, distinct product ids comma-separated (at most 8), one unit of \
          each, all or nothing; without it the cart is `product` alone.",
    kind: Kind::Products { max: MAX_CART },
};

/// `lock_order`: in which order the cart's locks are taken.
pub const LOCK_ORDER: Knob = Knob {
    name: "lock_order",
    doc: "multi: sorted (the default) takes the cart's locks in one global order, so carts \
          never wait on each other in a circle; given takes them in the order of `products`, \
          and two carts with opposite orders deadlock until their waits run out.",
    kind: Kind::Choice {
        values: &["sorted", "given"],
    },
};

pub static SPEC: Spec = Spec {
    name: "multi",
    summary: "A cart of several products under Redisson's MultiLock: all locks or none within the wait, lock_order sorted or given (the deadlock)",
    color: "#455a64",
    knobs: &[
        WORK_MS,
        WAIT_MS.defaulting_to(DEFAULT_LOCK_WAIT_MS),
        PRODUCTS,
        LOCK_ORDER,
    ],
    in_progression: false,
    splits_stock: false,
    whole_stock: false,
    stock_in_database: false,
    must_finish: true,
    // A cart's refusal is counted in every product of the cart.
    counts_its_refusals: true,
    deduct: |d| Box::pin(deduct(d)),
};

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let cart = cart(d);
    let started = Instant::now();
    let locks = cart.iter().map(|product| {
        d.app
            .locks
            .lock_as(&product.whole().lock_name, &d.holder)
            .expecting_to_hold(d.knobs.work() + INSIDE_MARGIN)
    });
    // Sorted by the locks' keys (one global order), or in the order of the request.
    let locks = if d.knobs.choice(&LOCK_ORDER) == Some("given") {
        MultiLock::in_order_given(locks)
    } else {
        MultiLock::new(locks)
    };
    let taken = locks.try_acquire_for(d.knobs.wait()).await?;
    let metrics = &d.app.metrics;
    metrics.lock_acquired(d.variant.name(), taken.is_some(), started.elapsed());
    let Some(held) = taken else {
        count(d, &cart, Counter::LockBusy, started.elapsed()).await?;
        return Ok(Outcome::LockBusy);
    };
    // Given back when the cart is settled; abandoned, not released, if the request is
    // dropped with a line still on its way.
    let held = Holding::new(held);
    // A line whose answer was lost may still run: it must find its lock held (the next
    // holder would read the stock before it) until it is looked up.
    let sold = lost::learn(d, sell(d, &cart).await).await;
    if d.lost.unsettled() {
        let (variant, holder) = (d.variant, d.holder.to_string());
        d.lost.after_settled(Box::new(move || {
            Box::pin(async move {
                if let Err(err) = held.release().await {
                    tracing::warn!(%variant, holder, error = %err, "a cart's lock release failed");
                }
            })
        }));
    } else {
        section::log_release(d, held.release().await);
    }
    sold
}

/// The cart's products, in the order they are sold (sorted, unless `lock_order=given`).
fn cart(d: &Deduction) -> Vec<ProductKeys> {
    let mut products = d.knobs.products(&PRODUCTS).to_vec();
    if products.is_empty() {
        products.push(d.knobs.product.clone());
    }
    if d.knobs.choice(&LOCK_ORDER) != Some("given") {
        products.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    }
    products.iter().map(ProductKeys::new).collect()
}

/// A cart turned away: `counter` in each product's audit; with `lock_busy`, the carts
/// that waited in vain and how long.
async fn count(
    d: &Deduction,
    cart: &[ProductKeys],
    counter: Counter,
    waited: Duration,
) -> Result<(), AppError> {
    // One call per product: on a Cluster they live on different slots.
    for product in cart {
        let whole = product.whole();
        let audit = &whole.audit;
        let mut one = redis::pipe();
        one.hincr(audit, counter.field(), 1).ignore();
        if counter == Counter::LockBusy {
            let ms = i64::try_from(waited.as_millis()).unwrap_or(i64::MAX);
            one.hincr(audit, "multi_timed_out", 1)
                .ignore()
                .hincr(audit, "multi_waited_ms", ms)
                .ignore();
        }
        one.exec_async(&mut d.redis()).await?;
    }
    Ok(())
}

/// With every lock of the cart held: enter each product's critical section and read its
/// stock; sell one unit of each, or nothing when one is out.
async fn sell(d: &Deduction, cart: &[ProductKeys]) -> Result<Outcome, AppError> {
    let shards: Vec<Arc<ShardKeys>> = cart.iter().map(ProductKeys::whole).collect();
    let (stocks, epochs) = enter_all(d, &shards).await?;
    let out = stocks.iter().position(|s| s.is_none_or(|units| units <= 0));
    if let Some(out) = out {
        leave(d, &shards).await?;
        let Some(remaining) = stocks[out] else {
            return Err(AppError::UnknownProduct(cart[out].product.to_string()));
        };
        count(d, cart, Counter::SoldOut, Duration::ZERO).await?;
        return Ok(Outcome::SoldOut { remaining });
    }
    if let Some(why) = over_limit(d, &shards).await? {
        leave(d, &shards).await?;
        if why == Refusal::LimitReached {
            count(d, cart, Counter::LimitReached, Duration::ZERO).await?;
        }
        return d.refused(why).await;
    }
    section::work(d).await;
    let checkable = d.app.locks_beside_stock;
    let mut sold = Sold::default();
    for (line, (shard, epoch)) in shards.iter().zip(&epochs).enumerate() {
        let credentials = Credentials {
            lock_holder: checkable.then_some(d.holder.as_str()),
            token: None,
            epoch: epoch.as_deref(),
        };
        let ends = match commit_line(d, shard, credentials).await {
            Line::Sold(taken) => {
                sold.lines.push((shard.clone(), taken));
                continue;
            }
            Line::Ends(ends) => ends,
        };
        stopped_after(d, cart, shard, line).await;
        // Best effort: the cart's answer is what its lines came to either way.
        if let Err(left) = leave(d, &shards[line + 1..]).await {
            tracing::warn!(error = %left, "a cart's later lines were not left");
        }
        let ends = match ends {
            Err(Refused::Why(Refusal::Gone)) => {
                Err(AppError::UnknownProduct(cart[line].product.to_string()))
            }
            Err(Refused::Why(why)) => d.refused(why).await,
            Err(Refused::Error(err)) => Err(err),
            Ok(outcome) => Ok(outcome),
        };
        return sold.ends(ends);
    }
    Ok(sold.confirmed(d).await)
}

/// The lines of a cart sold so far: once one has, the cart's answer can no longer be that
/// nothing sold ([`Sold::ends`]).
#[derive(Default)]
struct Sold {
    lines: Vec<(Arc<ShardKeys>, Taken)>,
}

impl Sold {
    /// What the cart is answered when a line ends it with `ends` (it did not sell, or it
    /// is not known whether it did): that, while no line sold; otherwise the lines that did
    /// ([`Outcome::PartlySold`]) — never "nothing sold".
    fn ends(self, ends: Result<Outcome, AppError>) -> Result<Outcome, AppError> {
        if self.lines.is_empty() {
            return ends;
        }
        tracing::warn!(?ends, "a cart sold in part");
        Ok(Outcome::PartlySold(
            self.lines.into_iter().map(|(_, taken)| taken).collect(),
        ))
    }

    /// Every line sold: each asked of its own master's replicas. A `200` (naming the first
    /// line) once they all have theirs; else `503 unconfirmed`.
    async fn confirmed(self, d: &Deduction) -> Outcome {
        let confirmations = d.app.sale_confirmations.as_ref();
        let mut first = None;
        let mut all = true;
        for (shard, taken) in self.lines {
            let confirmed = sale::confirm(confirmations, &mut d.redis(), &shard, taken).await;
            all &= confirmed.is_ok();
            first.get_or_insert(confirmed);
        }
        match first.expect("a cart has at least one product") {
            Ok(confirmed) if all => Outcome::Deducted(confirmed),
            Ok(confirmed) => Outcome::Unconfirmed(confirmed.taken().clone()),
            Err(taken) => Outcome::Unconfirmed(taken),
        }
    }
}

/// What one line's commit came to.
enum Line {
    /// Its unit taken (on its master; not yet asked of the replicas).
    Sold(Taken),
    /// It ends the cart: its refusal, what its lost answer was learnt to be (the sale voided,
    /// or not known), or an error after which it cannot have sold.
    Ends(Result<Outcome, Refused>),
}

/// Why a line sold nothing: its script's refusal, or an error (its lost answer looked up).
enum Refused {
    Why(Refusal),
    Error(AppError),
}

/// Enters every line's critical section: each product's stock (`None`: no such product),
/// and the epoch of its sale the entry read (each line's commit sells only in it).
async fn enter_all(d: &Deduction, shards: &[Arc<ShardKeys>]) -> Result<Entered, AppError> {
    let stay = d.knobs.work() + INSIDE_MARGIN;
    let mut stocks = Vec::with_capacity(shards.len());
    let mut epochs = Vec::with_capacity(shards.len());
    for shard in shards {
        let (stock, _overlap, _traced, epoch): (Option<i64>, i64, bool, Option<String>) =
            scripts::enter(shard, &d.holder, stay, None, "")
                .invoke_async(&mut d.redis())
                .await?;
        stocks.push(stock);
        epochs.push(epoch);
    }
    Ok((stocks, epochs))
}

/// A line's limit (the audit's, the meta's), the buyer's units, and the key's record.
type Limits = (Option<i64>, Option<i64>, Option<i64>, Option<String>);

/// Each line's stock and epoch, as [`enter_all`] read them.
type Entered = (Vec<Option<i64>>, Vec<Option<String>>);

/// Under the cart's locks, before any line sells: why a line would refuse this buyer — its
/// product limits each buyer and the request named none, or the buyer has the limit there.
/// A line refused after others sold would leave the cart sold in part, its key answered as
/// refused (the commit checks it again: a variant without a lock may sell meanwhile).
async fn over_limit(d: &Deduction, shards: &[Arc<ShardKeys>]) -> Result<Option<Refusal>, AppError> {
    let user = d.user();
    let key = d.claim.as_ref().map_or("", |claim| claim.key.as_str());
    for shard in shards {
        let (in_audit, in_meta, bought, record): Limits = redis::pipe()
            .hget(&shard.audit, "per_user")
            .hget(&shard.meta, "per_user")
            .hget(&shard.buyers, user)
            .hget(&shard.keys, key)
            .query_async(&mut d.redis())
            .await?;
        let ours = record.is_some_and(|r| key_record(&r, wall_clock_ms()).is_some());
        let limit = in_audit.or(in_meta).unwrap_or(0);
        // A line an earlier try of this cart sold under its key is the cart's own: the
        // unit the buyer holds there is this one (`commit_line` takes it as sold).
        if limit <= 0 || ours {
            continue;
        }
        if user.is_empty() {
            return Ok(Some(Refusal::UserRequired));
        }
        if bought.unwrap_or(0) >= limit {
            return Ok(Some(Refusal::LimitReached));
        }
    }
    Ok(None)
}

/// One line's commit, on `shard`: its lost answer looked up, and a line an earlier try of
/// this cart sold under its key taken as this cart's.
async fn commit_line(d: &Deduction, shard: &ShardKeys, credentials: Credentials<'_>) -> Line {
    let order = Uuid::now_v7().to_string();
    let committed: Result<Reply, _> =
        scripts::commit(&d.sale(shard, &order), StockWrite::Decrement, credentials)
            .invoke_async(&mut d.redis())
            .await;
    let taken = |order, remaining| Taken {
        order,
        shard: shard.index,
        remaining,
    };
    let reply = match committed {
        Ok(reply) => {
            d.lost.answered();
            reply
        }
        // A line whose answer was lost is looked up before the cart goes on.
        Err(err) => {
            return match lost::learn(d, Err(err.into())).await {
                Ok(Outcome::Deducted(confirmed)) => Line::Sold(confirmed.taken().clone()),
                Ok(Outcome::Unconfirmed(sold)) => Line::Sold(sold),
                // Not known (looked up later), or another answer.
                Ok(other) => Line::Ends(Ok(other)),
                // Voided: the line never sold and never will (the look-up left its critical
                // section).
                Err(err) => Line::Ends(Err(Refused::Error(err))),
            };
        }
    };
    match reply {
        Reply::Units(remaining) => Line::Sold(taken(order, Some(remaining))),
        // Sold under this key by an earlier try of this cart, whose answer was lost: that
        // line is part of the cart (a repeat completes a cart, never buys a line twice).
        Reply::Refused(Refusal::TakenOver) if d.claim.is_some() => {
            match earlier_line(d, shard).await {
                Ok(Some((sold, stock))) => Line::Sold(taken(sold, stock)),
                Ok(None) => Line::Ends(Err(Refused::Why(Refusal::TakenOver))),
                Err(err) => Line::Ends(Err(Refused::Error(err))),
            }
        }
        Reply::Refused(why) => Line::Ends(Err(Refused::Why(why))),
    }
}

/// The order an earlier try of this cart sold on `shard` under its key, and the stock.
async fn earlier_line(
    d: &Deduction,
    shard: &ShardKeys,
) -> Result<Option<(String, Option<i64>)>, AppError> {
    let Some(claim) = &d.claim else {
        return Ok(None);
    };
    let (record, stock): (Option<String>, Option<i64>) = redis::pipe()
        .hget(&shard.keys, claim.key.as_str())
        .get(&shard.stock)
        .query_async(&mut d.redis())
        .await?;
    let sold = record.and_then(|r| key_record(&r, wall_clock_ms()).map(str::to_owned));
    Ok(sold.map(|sold| (sold, stock)))
}

/// A cart's line `line` sold nothing (or is not known to have): when lines before it sold,
/// the cart is half sold, counted in that line's audit (`multi_half_sold`).
async fn stopped_after(d: &Deduction, cart: &[ProductKeys], shard: &ShardKeys, line: usize) {
    if line == 0 {
        return;
    }
    tracing::warn!(
        cart = ?cart.iter().map(|p| p.product.to_string()).collect::<Vec<_>>(),
        "a cart's line sold nothing, or is not known to have, after others were sold"
    );
    let counted: Result<i64, _> = d.redis().hincr(&shard.audit, "multi_half_sold", 1).await;
    if let Err(err) = counted {
        tracing::warn!(error = %err, "a half-sold cart was not counted in the audit");
    }
}

/// Leaves the critical sections of `shards` without selling.
async fn leave(d: &Deduction, shards: &[Arc<ShardKeys>]) -> Result<(), AppError> {
    for shard in shards {
        let _: u64 = d.redis().zrem(&shard.inside, d.holder.as_str()).await?;
    }
    Ok(())
}
