//! A lost answer is not an undone command.
//!
//! A Redis command that timed out, or whose connection dropped after it was sent, may have
//! run — or may still run: it can sit unread in a paused Redis's socket and run the moment
//! Redis goes on, long after the instance answered and moved on. So when a sale's answer is
//! lost, nothing is given back on the guess that it did not run. The sale is looked up by
//! its order id on its shard (`lua/resolve.lua`): found, it was sold; not found, the id is
//! voided in the same step, so that the sale can never run after. Only then does the
//! deduction act on what happened: give the buyer's reservation back, release the
//! idempotency key's claim, release the lock held over the sale.
//!
//! When Redis does not answer the look-up either, the request is answered `504 unknown`,
//! with the order id to look up, and a task of its own looks the sale up again until Redis
//! answers (for up to [`SETTLE_FOR`]), then does what the request could not. Should the
//! instance die first, the rest is left to what outlives it: a repeat of the request takes
//! its idempotency key over (and finds the sale, or fences it out), the lock expires, and
//! the reservation stays — the buyer may buy one unit fewer, never one more.

mod replay;

pub(crate) use replay::{Replayed, replay};

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::RedisError;

use super::{Context, Deduction, Outcome};
use crate::error::AppError;
use crate::idempotency;
use crate::keys::ShardKeys;
use crate::outcome::sale::{self, Taken};
use crate::scripts;
use crate::store::Store;

/// How long a task keeps looking up a sale whose answer was lost before it gives up (and
/// leaves the claim to a repeat, the lock to its lease, the reservation in place).
pub const SETTLE_FOR: Duration = Duration::from_secs(60);

/// A sale sent to Redis: on which shard (its stock key and index: the rest follows), under
/// which order id.
#[derive(Debug, Clone)]
struct Sending {
    stock: String,
    index: u32,
    order: String,
}

impl Sending {
    fn shard(&self) -> ShardKeys {
        ShardKeys::of_stock(&self.stock, self.index)
    }
}

/// What to do once a lost sale is settled, besides the claim and the reservation: release
/// the locks held over it.
pub(crate) type Then = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// What the look-up found.
#[derive(Debug, Clone, Copy)]
enum Found {
    /// The sale ran: `remaining` units are left on its shard now.
    Sold { remaining: i64 },
    /// It had not run, and now never will.
    Voided,
}

/// What a deduction keeps for a sale whose answer may be lost: the sale in flight, the
/// one whose look-up failed, and what waits for it to be settled. A field of every
/// [`Deduction`] (`d.lost`); [`learn`] and [`settle_later`] act on it.
#[derive(Default)]
pub(crate) struct Lost {
    /// The sale sent and not yet answered ([`Lost::sending`]).
    sending: Mutex<Option<Sending>>,
    /// The sale whose answer was lost and could not be looked up ([`learn`]).
    unsettled: Mutex<Option<Sending>>,
    /// What waits for it to be looked up ([`Lost::after_settled`]).
    thens: Mutex<Vec<Then>>,
}

impl Lost {
    /// Notes that the sale `order` is being sent to `shard`, until its answer comes.
    pub(crate) fn sending(&self, shard: &ShardKeys, order: &str) {
        *lock(&self.sending) = Some(Sending {
            stock: shard.stock.clone(),
            index: shard.index,
            order: order.to_owned(),
        });
    }

    /// The sale's answer came: there is nothing to look up.
    pub(crate) fn answered(&self) {
        *lock(&self.sending) = None;
    }

    /// Whether a sale of this deduction's answer was lost and could not be looked up yet:
    /// it may still run, and what it holds must wait for it ([`Lost::after_settled`]).
    pub(crate) fn unsettled(&self) -> bool {
        lock(&self.unsettled).is_some()
    }

    /// Once this deduction's lost sale is settled, `then` (release the locks held over
    /// it: until the sale is known, it may still run, and must find them held).
    pub(crate) fn after_settled(&self, then: Then) {
        lock(&self.thens).push(then);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What `d` came to, when it ended in `outcome`. An error while a sale was in flight is
/// not a "no": the sale is looked up, and the answer is what happened — a sale (200), or
/// the error again once the sale is known never to run. When the look-up finds no answer
/// either, the outcome is [`Outcome::Unknown`], and the sale is looked up again later
/// ([`settle_later`]).
pub(crate) async fn learn(
    d: &Deduction,
    outcome: Result<Outcome, AppError>,
) -> Result<Outcome, AppError> {
    let Err(err) = &outcome else {
        return outcome;
    };
    if !err.answer_may_be_lost() {
        return outcome;
    }
    let Some(sale) = lock(&d.lost.sending).take() else {
        return outcome;
    };
    match look_up(&d.app.store, &sale, &d.holder).await {
        Ok(Found::Sold { remaining }) => {
            tracing::info!(order = %sale.order, "a sale's answer was lost; it was sold");
            Ok(d.sold(&sale.shard(), sale.order, remaining).await)
        }
        Ok(Found::Voided) => outcome,
        Err(lost) => {
            tracing::warn!(
                error = %lost,
                order = %sale.order,
                "a sale's answer was lost and it cannot be looked up now: answered unknown"
            );
            let unknown = Outcome::Unknown {
                order: sale.order.clone(),
                shard: sale.index,
            };
            *lock(&d.lost.unsettled) = Some(sale);
            Ok(unknown)
        }
    }
}

/// When `d` ended [`Outcome::Unknown`]: a task that looks its sale up until Redis
/// answers, then gives the reservation back (if the sale never ran), gives the
/// idempotency key's claim its answer, and runs what [`Lost::after_settled`] asked.
pub(crate) fn settle_later(d: &Deduction) {
    let Some(sale) = lock(&d.lost.unsettled).take() else {
        return;
    };
    let thens = std::mem::take(&mut *lock(&d.lost.thens));
    let settle = Settle {
        app: d.app.clone(),
        product: d.product.clone(),
        holder: d.holder.to_string(),
        sale,
        claim: d.claim.clone(),
        reserved: d.reserved.load(Ordering::Relaxed),
        answered_after: d.answers_after_sale(),
        cart: d.knobs.cart().is_some(),
        thens,
    };
    tokio::spawn(settle.run());
}

/// `resolve.lua` for `holder`'s `sale`. The stock is read as text: one that is not a whole
/// number (written by hand, and what failed the sale's script) still lets the sale be
/// found or voided.
async fn look_up(store: &Store, sale: &Sending, holder: &str) -> Result<Found, RedisError> {
    let (sold, stock): (i64, Option<String>) = scripts::resolve(&sale.shard(), holder, &sale.order)
        .invoke_async(&mut store.conn())
        .await?;
    Ok(match sold {
        1 => Found::Sold {
            remaining: stock.and_then(|s| s.parse().ok()).unwrap_or(0),
        },
        _ => Found::Voided,
    })
}

/// A lost sale, and what waits on its look-up.
struct Settle {
    app: std::sync::Arc<Context>,
    product: Arc<crate::keys::ProductKeys>,
    holder: String,
    sale: Sending,
    claim: Option<idempotency::Claim>,
    reserved: bool,
    /// The claim gets its answer after the sale ([`Deduction::answers_after_sale`]).
    answered_after: bool,
    /// A cart: a line found sold is not the cart's answer; a repeat completes the cart.
    cart: bool,
    thens: Vec<Then>,
}

impl Settle {
    async fn run(self) {
        let started = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        let found = loop {
            tokio::time::sleep(pause).await;
            match look_up(&self.app.store, &self.sale, &self.holder).await {
                Ok(found) => break found,
                Err(err) if started.elapsed() < SETTLE_FOR => {
                    tracing::debug!(error = %err, order = %self.sale.order, "looking a lost sale up again");
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(err) => {
                    tracing::warn!(
                        error = %err,
                        order = %self.sale.order,
                        "a lost sale could not be looked up in {SETTLE_FOR:?}: its claim waits \
                         for a repeat, its locks for their leases, its reservation stays"
                    );
                    return;
                }
            }
        };
        tracing::info!(order = %self.sale.order, ?found, "a lost sale, looked up");
        match found {
            Found::Voided => {
                if self.reserved
                    && let Err(err) = give_back(&self.app, &self.product, &self.holder).await
                {
                    tracing::warn!(error = %err, "a reservation no sale used was not given back: trying again");
                    give_back_later(self.app.clone(), self.product.clone(), self.holder.clone());
                }
                if let Some(claim) = &self.claim {
                    idempotency::finish(&self.app.idempotency, claim, &self.holder, None, false)
                        .await;
                }
            }
            Found::Sold { remaining } => {
                if let Some(claim) = self.claim.as_ref().filter(|_| !self.cart) {
                    // The key's answer, as any sale's: a 200 once replicas have it.
                    let taken = Taken {
                        order: self.sale.order.clone(),
                        shard: self.sale.index,
                        remaining: Some(remaining),
                    };
                    let confirm = self.app.sale_confirmations.as_ref();
                    let shard = self.sale.shard();
                    let sold =
                        match sale::confirm(confirm, &mut self.app.store.conn(), &shard, taken)
                            .await
                        {
                            Ok(confirmed) => Outcome::Deducted(confirmed),
                            Err(taken) => Outcome::Unconfirmed(taken),
                        };
                    // Recorded by the sale's script only as a whole product's 200.
                    let recorded = !self.answered_after;
                    idempotency::finish(
                        &self.app.idempotency,
                        claim,
                        &self.holder,
                        Some(&sold),
                        recorded,
                    )
                    .await;
                }
            }
        }
        for then in self.thens {
            then().await;
        }
    }
}

/// [`give_back`] in a task of its own, tried again until Redis answers (for up to
/// [`SETTLE_FOR`]): after a give-back that failed, as [`Settle`] does for a lost sale. Only
/// a reservation known unused is given this way; should every try fail, the buyer may buy
/// one unit fewer, never one more.
pub(crate) fn give_back_later(
    app: Arc<Context>,
    product: Arc<crate::keys::ProductKeys>,
    holder: String,
) {
    tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            tokio::time::sleep(pause).await;
            match give_back(&app, &product, &holder).await {
                Ok(()) => {
                    tracing::info!(holder, "a reservation no sale used, given back late");
                    return;
                }
                Err(err) if started.elapsed() < SETTLE_FOR => {
                    tracing::debug!(error = %err, holder, "giving a reservation back again");
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(err) => {
                    tracing::warn!(
                        error = %err,
                        holder,
                        "a reservation could not be given back in {SETTLE_FOR:?}: the buyer \
                         may buy one unit fewer"
                    );
                    return;
                }
            }
        }
    });
}

/// `holder`'s reservation of `product`'s unit back to its buyer, if nobody gave it back
/// yet (`lua/reserve.lua`).
pub(crate) async fn give_back(
    app: &Context,
    product: &crate::keys::ProductKeys,
    holder: &str,
) -> Result<(), RedisError> {
    let _: i64 = scripts::give_back(product, holder)
        .invoke_async(&mut app.store.conn())
        .await?;
    Ok(())
}
