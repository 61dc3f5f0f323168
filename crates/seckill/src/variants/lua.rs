//! `lua` — one script checks and decrements atomically and records the order; no lock.
//!
//! Correct, and the goodput ceiling the lock variants are measured against.
//!
//! Every deduction is one unit, taken or not by `lua/deduct.lua` inside Redis. What is
//! shared is the trip there: while an instance's call is in flight, the deductions that
//! arrive wait, and go together in its next call (group commit; with
//! `--redis-wait-replicas`, one confirmation covers the call's sales). On one Redis (or
//! behind sentinels) one call carries every product's deductions, a line per product, so
//! a sale spread over many products batches as well as one hot product does; on a Redis
//! Cluster, where a script's keys share a slot, each product has its own call in flight,
//! and a slow one holds up no other product. A deduction that finds no call in flight
//! sends one itself, on its own task, as a plain service would. Under load that turns a
//! hundred round trips into a few. The round trip, not the script, is most of what a
//! deduction costs (see PERFORMANCE.md); `batch=off` sends each deduction on its own, to
//! show it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use redis::{ErrorKind, RedisError, Value};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::sale::confirm_sales;
use super::{Deduction, Outcome, Spec, Start};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::knobs::{Kind, Knob};
use crate::scripts;
use crate::scripts::{Refusal, Reply};
use crate::store::{Confirmations, RedisConn, RedisMode};

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

/// Most deductions in one call (on one Redis, every product's together). Past a few dozen
/// on one product, a bigger call saves nothing more.
pub const MAX_BATCH: usize = 128;

/// The instance's lua deductions, by product ([`LuaBatches`]).
pub(super) fn start(start: &Start<'_>) -> LuaBatches {
    LuaBatches::start(
        start.store.conn(),
        start.store.mode() == RedisMode::Cluster,
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
        d.app.variant_state.lua.deduct(shard, sale).await?
    } else {
        let (instance, confirm) = (&d.app.settings.instance, d.app.sale_confirmations.clone());
        let mut redis = d.redis();
        let lines = [Line::of(&shard, [&sale])];
        let units = Box::pin(call(&mut redis, instance, &lines, confirm)).await?;
        first_unit(units)?
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

    fn as_script_takes_it(&self) -> scripts::Deduct<'_> {
        scripts::Deduct {
            order: &self.order,
            user: &self.user,
            holder: &self.holder,
            key: &self.key,
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

/// What the script answered for one product of a call, one [`Unit`] per deduction, in
/// order: the stock before the call, then each deduction's answer (1 sold, 0 sold out, or
/// a refusal); nothing when the product has no stock key. `confirmed`: whether the
/// replicas asked for confirmed the call's sales.
fn units(script: &[Reply], count: usize, confirmed: bool) -> Vec<Unit> {
    let Some((&Reply::Units(before), answers)) = script.split_first() else {
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

/// The first line's first deduction's unit: a call of one.
fn first_unit(units: Vec<LineUnits>) -> Result<Unit, RedisError> {
    match units.into_iter().next() {
        Some(line) => Ok(line?.first().copied().unwrap_or(Unit::NotForSale)),
        None => Ok(Unit::NotForSale),
    }
}

/// One product's deductions in a call: its shard, and its sales in their order.
struct Line<'a> {
    shard: &'a ShardKeys,
    sales: Vec<&'a Batched>,
}

impl<'a> Line<'a> {
    fn of(shard: &'a ShardKeys, sales: impl IntoIterator<Item = &'a Batched>) -> Self {
        Self {
            shard,
            sales: sales.into_iter().collect(),
        }
    }
}

/// What one line of a call came to: its deductions' units, or the error that failed the
/// line alone (`deduct.lua` runs each line under `pcall`).
type LineUnits = Result<Vec<Unit>, RedisError>;

/// A line's reply: its answers, or, as a string, the error that failed it.
fn line_replies(line: Value) -> Result<Vec<Reply>, RedisError> {
    match line {
        Value::BulkString(error) => Err(RedisError::from((
            ErrorKind::Extension,
            "deduct.lua",
            String::from_utf8_lossy(&error).into_owned(),
        ))),
        answers => redis::from_redis_value(answers).map_err(RedisError::from),
    }
}

/// Runs `deduct.lua` for `lines`, product by product, each's sales in their order; with
/// `confirm`, one confirmation by the replicas covers every sale of the call. The units,
/// a line each.
async fn call(
    redis: &mut RedisConn,
    instance: &str,
    lines: &[Line<'_>],
    confirm: Option<Arc<Confirmations>>,
) -> Result<Vec<LineUnits>, RedisError> {
    let script = scripts::deduct(
        instance,
        SPEC.name,
        lines.iter().map(|line| {
            let sales = line.sales.iter().map(|sale| sale.as_script_takes_it());
            (line.shard, sales)
        }),
    );
    let result: Vec<Value> = script.invoke_async(redis).await?;
    let result: Vec<Result<Vec<Reply>, RedisError>> =
        result.into_iter().map(line_replies).collect();
    let sold: Vec<(&ShardKeys, i64)> = lines
        .iter()
        .zip(&result)
        .filter_map(|(line, replies)| {
            let sold = replies.as_ref().ok()?.iter().skip(1);
            let sold = sold.filter(|&&a| a == Reply::Units(1)).count() as i64;
            (sold > 0).then_some((line.shard, sold))
        })
        .collect();
    let confirmed = sold.is_empty() || confirm_sales(confirm.as_ref(), redis, &sold).await;
    let mut result = result.into_iter();
    Ok(lines
        .iter()
        .map(|line| match result.next() {
            Some(Ok(replies)) => Ok(units(&replies, line.sales.len(), confirmed)),
            Some(Err(err)) => Err(err),
            None => Ok(units(&[], line.sales.len(), confirmed)),
        })
        .collect())
}

/// A deduction waiting for its call.
struct Waiting {
    shard: Arc<ShardKeys>,
    sale: Batched,
    answer: oneshot::Sender<Result<Unit, RedisError>>,
}

/// The instance's lua deductions: one script call at a time for each queue (one more only
/// after a request whose call was in flight was dropped), and what arrives meanwhile waits
/// for the queue's next call (group commit). On one Redis (or behind sentinels) the
/// instance has one queue, every product's deductions in it; on a Redis Cluster, where a
/// script's keys must share a slot, one per product. A deduction that finds its queue idle
/// sends its call itself, on its own task, as a plain service would; only a busy queue
/// holds deductions, and up to [`MAX_BATCH`] of them go in one call of a task of its own as
/// soon as the call in flight is answered (and confirmed, with `--redis-wait-replicas`).
/// One product's line that fails (a key of another type) fails that line alone. Cheap to
/// clone.
#[derive(Clone)]
pub struct LuaBatches(Arc<Batches>);

struct Batches {
    /// By queue, those with a call in flight, and what waits for their next. Held for a
    /// lookup and a push, never across an await.
    queues: Mutex<HashMap<String, Vec<Waiting>>>,
    /// A queue per product (a Redis Cluster), else one for all.
    per_product: bool,
    redis: RedisConn,
    instance: Arc<str>,
    confirm: Option<Arc<Confirmations>>,
}

impl LuaBatches {
    fn start(
        redis: RedisConn,
        per_product: bool,
        instance: Arc<str>,
        confirm: Option<Arc<Confirmations>>,
    ) -> Self {
        Self(Arc::new(Batches {
            queues: Mutex::new(HashMap::new()),
            per_product,
            redis,
            instance,
            confirm,
        }))
    }

    fn queues(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Waiting>>> {
        self.0.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue of `shard`'s deductions.
    fn queue_of(&self, shard: &ShardKeys) -> String {
        if self.0.per_product {
            shard.stock.clone()
        } else {
            String::new()
        }
    }

    /// `sale` from `shard`: sent now when its queue has no call in flight, else in the
    /// queue's next call.
    ///
    /// # Cancel safety
    ///
    /// Dropped while it waits in its queue, the sale is left out of the next call (a
    /// request that is gone sells nothing). Dropped once its call is sent — its own, or the
    /// queue's that took it — the sale may still be made, as any command whose answer is
    /// lost; the queue goes on in the next call all the same.
    async fn deduct(&self, shard: Arc<ShardKeys>, sale: Batched) -> Result<Unit, AppError> {
        let queue = self.queue_of(&shard);
        let joined = {
            let mut queues = self.queues();
            match queues.get_mut(&queue) {
                Some(waiting) => {
                    let (answer, answered) = oneshot::channel();
                    waiting.push(Waiting {
                        shard,
                        sale,
                        answer,
                    });
                    Err(answered)
                }
                None => {
                    queues.insert(queue.clone(), Vec::new());
                    Ok((shard, sale))
                }
            }
        };
        let (shard, sale) = match joined {
            Ok(first) => first,
            Err(answered) => {
                return Ok(answered.await.unwrap_or_else(|_| Err(never_answered()))?);
            }
        };
        // This queue's sender: whatever ends the call (its answer, or the request
        // dropped), the queue goes on (`Next`).
        let _next = Next {
            batches: self.clone(),
            queue,
        };
        let batches = &self.0;
        let mut redis = batches.redis.clone();
        let lines = [Line::of(&shard, [&sale])];
        let units = call(
            &mut redis,
            &batches.instance,
            &lines,
            batches.confirm.clone(),
        )
        .await?;
        Ok(first_unit(units)?)
    }

    /// After a call for `queue`: what waits in it, up to [`MAX_BATCH`], in the next call,
    /// on a task of its own; or, nothing waiting, the queue idle again.
    fn send_next(&self, queue: String) {
        let batch: Vec<Waiting> = {
            let mut queues = self.queues();
            let Some(waiting) = queues.get_mut(&queue) else {
                return;
            };
            // A request that is gone (its client hung up, or it timed out) sells nothing.
            waiting.retain(|w| !w.answer.is_closed());
            if waiting.is_empty() {
                queues.remove(&queue);
                return;
            }
            waiting.drain(..waiting.len().min(MAX_BATCH)).collect()
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send it on (the instance is shutting down): the queue is let
            // go, and its deductions are answered as never answered.
            self.queues().remove(&queue);
            return;
        };
        // Made before the task, so that a task dropped before it first runs hands the
        // queue on all the same.
        let next = Next {
            batches: self.clone(),
            queue,
        };
        runtime.spawn(async move {
            send(&next.batches.0, batch).await;
            drop(next);
        });
    }
}

/// The queue's next call, sent once this one ends however it ends.
struct Next {
    batches: LuaBatches,
    queue: String,
}

impl Drop for Next {
    fn drop(&mut self) {
        self.batches.send_next(std::mem::take(&mut self.queue));
    }
}

/// A queued deduction whose call's answer never reached it (the task that sent the call
/// stopped): the call may have run, so the sale is looked up, as a lost answer is.
fn never_answered() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the answer of the lua call this deduction went in never reached it",
    ))
}

/// One call for a batch of deductions, a line per product in the order they first came,
/// and their answers.
async fn send(batches: &Batches, batch: Vec<Waiting>) {
    let mut lines: Vec<Line<'_>> = Vec::new();
    let mut at: Vec<(usize, usize)> = Vec::with_capacity(batch.len());
    for waiting in &batch {
        let stock = &waiting.shard.stock;
        let i = match lines.iter().position(|line| line.shard.stock == *stock) {
            Some(i) => i,
            None => {
                lines.push(Line::of(&waiting.shard, []));
                lines.len() - 1
            }
        };
        at.push((i, lines[i].sales.len()));
        lines[i].sales.push(&waiting.sale);
    }
    let mut redis = batches.redis.clone();
    let confirm = batches.confirm.clone();
    let units = call(&mut redis, &batches.instance, &lines, confirm).await;
    drop(lines);
    for (waiting, (line, j)) in batch.into_iter().zip(at) {
        let unit = match units.as_ref().map(|units| &units[line]) {
            Ok(Ok(line)) => Ok(line.get(j).copied().unwrap_or(Unit::NotForSale)),
            Ok(Err(err)) | Err(err) => Err(err.clone()),
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
        let sold = units(&[Units(3), Units(1), limit, Units(1), Units(0)], 4, true);
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
        assert_eq!(units(&[Units(-4), Units(0)], 1, true), [Unit::SoldOut]);
        assert_eq!(units(&[], 2, true), [Unit::NotForSale; 2]);
        let unconfirmed = units(&[Units(3), Units(1), Units(0)], 2, false);
        assert_eq!(unconfirmed, [Unit::Unconfirmed, Unit::SoldOut]);
    }
}
