//! `lua` — one script checks and decrements atomically and records the order; no lock.
//!
//! Correct, and the goodput ceiling the lock variants are measured against.
//!
//! Every deduction is one unit, taken or not by `lua/deduct.lua` inside Redis. What is
//! shared is the trip there: while an instance's call for a product is in flight, the
//! deductions that arrive for it wait, and go together in its next call (group commit;
//! with `--redis-wait-replicas`, one confirmation covers the call's sales). Each product
//! has its own call in flight: a slow one holds up no other product. A deduction that
//! finds its product idle sends the call itself, on its own task — the path of a plain
//! service, which a sale spread over many products mostly takes. On a hot product, under
//! load, it turns a hundred round trips into a few. The round trip, not the script, is most of what a deduction costs (see
//! PERFORMANCE.md); `batch=off` sends each deduction on its own, to show it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use redis::RedisError;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::sale::confirm_sales;
use super::{Deduction, Outcome, Spec, Start};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::knobs::{Kind, Knob};
use crate::scripts;
use crate::scripts::{Refusal, Reply};
use crate::store::{Confirmations, RedisConn};

/// `batch=off`: each deduction in a script call of its own.
pub const BATCH: Knob = Knob {
    name: "batch",
    doc: "lua only: on (the default) sends the deduction in the instance's next shared \
          script call with the others that arrived meanwhile; off sends it in a call of \
          its own.",
    kind: Kind::Switch { default: true },
};

pub static SPEC: Spec = Spec {
    name: "lua",
    summary: "one script checks, takes a unit and records the order: no lock, the ceiling",
    color: "#00838f",
    knobs: &[BATCH],
    in_progression: true,
    splits_stock: false,
    whole_stock: true,
    stock_in_database: false,
    // One atomic script: if it is sent at all, it runs whole.
    must_finish: false,
    counts_its_refusals: true,
    deduct: |d| Box::pin(deduct(d)),
};

/// Most deductions in one call. Past a few dozen, a bigger call saves nothing more.
pub const MAX_BATCH: usize = 128;

/// The instance's lua deductions, by product ([`LuaBatches`]).
pub(super) fn start(start: &Start<'_>) -> LuaBatches {
    LuaBatches::start(
        start.store.conn(),
        start.settings.instance.clone(),
        start.sale_confirmations.cloned(),
    )
}

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shard = d.whole_stock();
    let index = shard.index;
    let sale = Batched::of(d, Uuid::now_v7().to_string());
    let order = sale.order.clone();
    d.lost.sending(&shard, &order);
    let unit = if d.knobs.switch(&BATCH) {
        d.app.variant_state.lua.deduct(&shard, sale).await?
    } else {
        let (instance, confirm) = (&d.app.settings.instance, d.app.sale_confirmations.clone());
        let mut redis = d.redis();
        let units = Box::pin(call(&mut redis, instance, &shard, &[sale], confirm)).await?;
        units.first().copied().unwrap_or(Unit::NotForSale)
    };
    d.lost.answered();
    match unit {
        // The rare answers' futures are boxed, so as not to make every request's larger.
        Unit::NotForSale => Err(Box::pin(d.not_for_sale()).await),
        Unit::SoldOut => Ok(Outcome::SoldOut { remaining: 0 }),
        Unit::Sold { remaining } => Ok(Outcome::Deducted {
            remaining,
            order,
            shard: index,
        }),
        Unit::Unconfirmed => Ok(Outcome::Unconfirmed {
            order,
            shard: index,
        }),
        Unit::Refused(why) => Box::pin(d.refused(why)).await,
    }
}

/// One deduction as the script takes it.
#[derive(Debug)]
struct Batched {
    order: String,
    /// The buyer, or `""`.
    user: String,
    holder: String,
    /// The idempotency key (`""`: none).
    key: String,
}

impl Batched {
    fn of(d: &Deduction, order: String) -> Self {
        let key = d.claim.as_ref().map_or("", |c| c.key.as_str());
        Self {
            order,
            user: d.user().to_owned(),
            holder: d.holder.to_string(),
            key: key.to_owned(),
        }
    }
}

/// What one deduction got from a call of the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Sold {
        remaining: i64,
    },
    /// A unit taken and recorded, that too few replicas confirmed in time.
    Unconfirmed,
    SoldOut,
    NotForSale,
    /// The buyer has their limit, or the product has one and no buyer was named; the key
    /// is another request's now; the sale was voided.
    Refused(Refusal),
}

/// What the script answered for a call, one [`Unit`] per deduction, in order: the stock
/// before the call, then each deduction's answer (1 sold, 0 sold out, or a refusal);
/// nothing when the product has no stock key. `confirmed`: whether the replicas asked for
/// confirmed the call's sales.
fn units(script: Option<Vec<Reply>>, count: usize, confirmed: bool) -> Vec<Unit> {
    let Some((&Reply::Units(before), answers)) = script.as_deref().and_then(<[Reply]>::split_first)
    else {
        return vec![Unit::NotForSale; count];
    };
    let mut sold = 0;
    answers
        .iter()
        .map(|&answer| match answer {
            Reply::Units(1) if !confirmed => Unit::Unconfirmed,
            Reply::Units(1) => {
                sold += 1;
                Unit::Sold {
                    remaining: before - sold,
                }
            }
            Reply::Units(_) => Unit::SoldOut,
            Reply::Refused(why) => Unit::Refused(why),
        })
        .collect()
}

/// Runs `deduct.lua` for `sales`, in that order, on one shard; with `confirm`, one
/// confirmation by the replicas covers every sale of the call.
async fn call<'a>(
    redis: &mut RedisConn,
    instance: &str,
    shard: &ShardKeys,
    sales: impl IntoIterator<Item = &'a Batched>,
    confirm: Option<Arc<Confirmations>>,
) -> Result<Vec<Unit>, RedisError> {
    let mut count = 0;
    let sales = sales.into_iter().map(|sale| {
        count += 1;
        scripts::Deduct {
            order: &sale.order,
            user: &sale.user,
            holder: &sale.holder,
            key: &sale.key,
        }
    });
    let script = scripts::deduct(shard, instance, SPEC.name, sales);
    let result: Option<Vec<Reply>> = script.invoke_async(redis).await?;
    let sold = result.as_deref().map_or(0, |r| {
        r.iter().skip(1).filter(|&&a| a == Reply::Units(1)).count()
    });
    let confirmed = sold == 0 || confirm_sales(confirm.as_ref(), redis, shard, sold as i64).await;
    Ok(units(result, count, confirmed))
}

/// A deduction waiting for its product's next call.
struct Waiting {
    sale: Batched,
    answer: oneshot::Sender<Result<Unit, RedisError>>,
}

/// The instance's lua deductions, product by product: at most one script call in flight
/// for each, and what arrives meanwhile waits for the next (group commit). A deduction
/// that finds its product idle sends its call itself, on its own task, as a plain service
/// would; only a product with a call in flight queues, and its queue goes in one call of
/// a task of its own as soon as that call is answered. Cheap to clone.
#[derive(Clone)]
pub struct LuaBatches(Arc<Batches>);

struct Batches {
    /// By stock key, the products with a call in flight, and what waits for their next.
    /// Held for a lookup and a push, never across an await.
    products: Mutex<HashMap<String, Vec<Waiting>>>,
    redis: RedisConn,
    instance: Arc<str>,
    confirm: Option<Arc<Confirmations>>,
}

impl LuaBatches {
    fn start(redis: RedisConn, instance: Arc<str>, confirm: Option<Arc<Confirmations>>) -> Self {
        Self(Arc::new(Batches {
            products: Mutex::new(HashMap::new()),
            redis,
            instance,
            confirm,
        }))
    }

    fn products(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Waiting>>> {
        self.0
            .products
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `sale` from `shard`: sent now when the product has no call in flight, else in its
    /// next call.
    ///
    /// # Cancel safety
    ///
    /// Dropped while it waits for its product's next call, the sale is left out of it
    /// (a request that is gone sells nothing). Dropped while its own call is in flight,
    /// the sale may still be made, as any command whose answer is lost; the product's
    /// queue goes on in the next call all the same.
    async fn deduct(&self, shard: &ShardKeys, sale: Batched) -> Result<Unit, AppError> {
        let queued = {
            let mut products = self.products();
            match products.get_mut(&shard.stock) {
                Some(queue) => {
                    let (answer, answered) = oneshot::channel();
                    queue.push(Waiting { sale, answer });
                    Err(answered)
                }
                None => {
                    products.insert(shard.stock.clone(), Vec::new());
                    Ok(sale)
                }
            }
        };
        let sale = match queued {
            Ok(sale) => sale,
            Err(answered) => {
                let gone =
                    || AppError::Internal(anyhow::anyhow!("a lua call's answer was dropped"));
                return Ok(answered.await.map_err(|_| gone())??);
            }
        };
        // This product's sender: whatever ends the call (its answer, or the request
        // dropped), the queue goes on (`Next`).
        let _next = Next {
            batches: self,
            shard,
        };
        let batches = &self.0;
        let mut redis = batches.redis.clone();
        let confirm = batches.confirm.clone();
        let units = call(&mut redis, &batches.instance, shard, [&sale], confirm).await?;
        Ok(units.first().copied().unwrap_or(Unit::NotForSale))
    }

    /// After a call for `shard`'s product: its queue, up to [`MAX_BATCH`], in the next
    /// call, on a task of its own; or, nothing queued, the product idle again.
    fn send_next(&self, shard: &ShardKeys) {
        let batch: Vec<Waiting> = {
            let mut products = self.products();
            let Some(queue) = products.get_mut(&shard.stock) else {
                return;
            };
            // A request that is gone (its client hung up, or it timed out) sells nothing.
            queue.retain(|w| !w.answer.is_closed());
            if queue.is_empty() {
                products.remove(&shard.stock);
                return;
            }
            queue.drain(..queue.len().min(MAX_BATCH)).collect()
        };
        let (batches, shard) = (self.clone(), ShardKeys::clone(shard));
        tokio::spawn(async move {
            let _next = Next {
                batches: &batches,
                shard: &shard,
            };
            send(&batches.0, &shard, batch).await;
        });
    }
}

/// The product's next call, sent once this one ends however it ends.
struct Next<'a> {
    batches: &'a LuaBatches,
    shard: &'a ShardKeys,
}

impl Drop for Next<'_> {
    fn drop(&mut self) {
        self.batches.send_next(self.shard);
    }
}

/// One call for a batch of one product's deductions, and their answers.
async fn send(batches: &Batches, shard: &ShardKeys, batch: Vec<Waiting>) {
    let mut redis = batches.redis.clone();
    let sales = batch.iter().map(|w| &w.sale);
    let units = call(
        &mut redis,
        &batches.instance,
        shard,
        sales,
        batches.confirm.clone(),
    )
    .await;
    for (i, waiting) in batch.into_iter().enumerate() {
        let unit = match &units {
            Ok(units) => Ok(units.get(i).copied().unwrap_or(Unit::NotForSale)),
            Err(err) => Err(err.clone()),
        };
        let _ = waiting.answer.send(unit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_deduction_of_a_call_gets_what_the_script_answered_for_it() {
        use Reply::{Refused, Units};
        let limit = Refused(Refusal::LimitReached);
        let sold = units(
            Some(vec![Units(3), Units(1), limit, Units(1), Units(0)]),
            4,
            true,
        );
        assert_eq!(
            sold,
            [
                Unit::Sold { remaining: 2 },
                Unit::Refused(Refusal::LimitReached),
                Unit::Sold { remaining: 1 },
                Unit::SoldOut
            ]
        );
        // Below zero is a stock (two holders under a broken lock sold the last unit).
        assert_eq!(
            units(Some(vec![Units(-4), Units(0)]), 1, true),
            [Unit::SoldOut]
        );
        assert_eq!(units(None, 2, true), [Unit::NotForSale; 2]);
        let unconfirmed = units(Some(vec![Units(3), Units(1), Units(0)]), 2, false);
        assert_eq!(unconfirmed, [Unit::Unconfirmed, Unit::SoldOut]);
    }
}
