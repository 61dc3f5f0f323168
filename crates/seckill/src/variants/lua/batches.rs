//! The calls of `deduct.lua` and the queues that share them ([`LuaBatches`]): a call is a
//! line per product, and a deduction that finds its queue idle sends its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::sync::oneshot;

use super::{Batched, MAX_BATCH, SPEC, Unit};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::outcome::sale::{self, Verdict};
use crate::scripts::{self, Reply};
use crate::store::{Confirmations, RedisConn};

/// What the script answered for one product of a call, one [`Unit`] per deduction, in
/// order: the stock before the call, then each deduction's answer (1 sold, 0 sold out, or
/// a refusal); nothing when the product has no stock key. `verdict`: whether the replicas
/// asked for confirmed the call's sales.
fn units(script: &[Reply], count: usize, verdict: Verdict) -> Vec<Unit> {
    let Some((&Reply::Units(before), answers)) = script.split_first() else {
        return vec![Unit::NotForSale; count];
    };
    let mut sold = 0;
    answers
        .iter()
        .map(|&answer| match answer {
            Reply::Units(1) => {
                sold += 1;
                Unit::Sold {
                    remaining: before - sold,
                    verdict,
                }
            }
            Reply::Units(_) => Unit::SoldOut,
            Reply::Refused(why) => Unit::Refused(why),
        })
        .collect()
}

/// The first line's first deduction's unit: a call of one.
pub(super) fn first_unit(units: Vec<LineUnits>) -> Result<Unit, Failed> {
    match units.into_iter().next() {
        Some(line) => Ok(line
            .map_err(Failed::of_line)?
            .first()
            .copied()
            .unwrap_or(Unit::NotForSale)),
        None => Ok(Unit::NotForSale),
    }
}

/// Why a deduction has no unit: its call failed, as any command may; or its line failed
/// in the script, which may have written before it failed — a sale, even — so what the
/// deduction came to is looked up ([`AppError::ScriptFailed`]), never read as nothing sold.
#[derive(Debug, Clone)]
pub(super) enum Failed {
    Call(RedisError),
    Line(RedisError),
}

impl Failed {
    /// A line's error: looked up, unless it was `READONLY` — the script ran on a replica (a
    /// master demoted under the instance, behind sentinels), where no write of the call can
    /// have run: the call's failure then, answered `503` as any `READONLY` is.
    fn of_line(err: RedisError) -> Self {
        if err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) {
            Self::Call(err)
        } else {
            Self::Line(err)
        }
    }
}

impl From<RedisError> for Failed {
    fn from(err: RedisError) -> Self {
        Self::Call(err)
    }
}

impl From<Failed> for AppError {
    fn from(failed: Failed) -> Self {
        match failed {
            Failed::Call(err) => err.into(),
            Failed::Line(err) => AppError::ScriptFailed(err),
        }
    }
}

/// One product's deductions in a call: its shard, and its sales in their order.
pub(super) struct Line<'a> {
    shard: &'a ShardKeys,
    sales: Vec<&'a Batched>,
}

impl<'a> Line<'a> {
    pub(super) fn of(shard: &'a ShardKeys, sales: impl IntoIterator<Item = &'a Batched>) -> Self {
        Self {
            shard,
            sales: sales.into_iter().collect(),
        }
    }
}

/// What one line of a call came to: its deductions' units, or the error that failed the
/// line alone (`deduct.lua` runs each line under `pcall`).
type LineUnits = Result<Vec<Unit>, RedisError>;

/// A line's reply: its answers, or, as a string, the error that failed it (a `READONLY`
/// one kept as such: see [`Failed::of_line`]).
fn line_replies(line: Value) -> Result<Vec<Reply>, RedisError> {
    match line {
        Value::BulkString(error) => {
            let error = String::from_utf8_lossy(&error).into_owned();
            let kind = if error.starts_with("line failed: READONLY ") {
                ErrorKind::Server(ServerErrorKind::ReadOnly)
            } else {
                ErrorKind::Extension
            };
            Err(RedisError::from((kind, "deduct.lua", error)))
        }
        answers => redis::from_redis_value(answers).map_err(RedisError::from),
    }
}

/// Runs `deduct.lua` for `lines`, product by product, each's sales in their order; with
/// `confirm`, one confirmation by the replicas covers every sale of the call. The units,
/// a line each.
pub(super) async fn call(
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
    // A line answered for other than its deductions, or no answer for a line: not the
    // script's reply shape, so not read as "not for sale" — the line failed, and what its
    // deductions came to is looked up.
    let mut result = result.into_iter();
    let result: Vec<Result<Vec<Reply>, RedisError>> = lines
        .iter()
        .map(|line| {
            let expected = 1 + line.sales.len();
            let unlike =
                |what: String| RedisError::from((ErrorKind::Extension, "deduct.lua", what));
            let Some(reply) = result.next() else {
                return Err(unlike(format!("no answer for a line of {expected}")));
            };
            let replies = line_replies(reply)?;
            if replies.is_empty() || replies.len() == expected {
                Ok(replies)
            } else {
                Err(unlike(format!(
                    "a line answered {} for {expected}",
                    replies.len()
                )))
            }
        })
        .collect();
    let demoted = |line: &Result<Vec<Reply>, RedisError>| {
        line.as_ref()
            .is_err_and(|err| err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly))
    };
    if result.iter().any(demoted) {
        // The script ran on a replica: the master it was sent to was demoted under the
        // connection, which saw no error of its own.
        redis.forget_master().await;
    }
    // Each line that sold, with its count of sales; and the first order sold, which the
    // confirmation finds on the master it asks.
    let mut witness = None;
    let sold: Vec<(&ShardKeys, i64)> = lines
        .iter()
        .zip(&result)
        .filter_map(|(line, replies)| {
            let answers = replies.as_ref().ok()?.iter().skip(1);
            let mut sold = 0;
            for (sale, _) in line
                .sales
                .iter()
                .zip(answers)
                .filter(|(_, a)| **a == Reply::Units(1))
            {
                witness.get_or_insert(sale.order.as_str());
                sold += 1;
            }
            (sold > 0).then_some((line.shard, sold))
        })
        .collect();
    let verdict = match witness {
        Some(witness) => sale::confirm_call(confirm.as_ref(), redis, &sold, witness).await,
        // Nothing sold: nothing to confirm.
        None => Verdict::NOTHING_TO_ASK,
    };
    Ok(lines
        .iter()
        .zip(result)
        .map(|(line, replies)| Ok(units(&replies?, line.sales.len(), verdict)))
        .collect())
}

/// A deduction waiting for its call.
struct Waiting {
    shard: Arc<ShardKeys>,
    sale: Batched,
    answer: oneshot::Sender<Result<Unit, Failed>>,
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
    pub(super) fn start(
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
    pub(super) async fn deduct(
        &self,
        shard: Arc<ShardKeys>,
        sale: Batched,
    ) -> Result<Unit, AppError> {
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
fn never_answered() -> Failed {
    Failed::Call(RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the answer of the lua call this deduction went in never reached it",
    )))
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
            Ok(Err(err)) => Err(Failed::of_line(err.clone())),
            Err(err) => Err(Failed::Call(err.clone())),
        };
        let _ = waiting.answer.send(unit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::Refusal;

    #[test]
    fn each_deduction_of_a_call_gets_what_the_script_answered_for_it() {
        use Reply::{Refused, Units};
        let limit = Refused(Refusal::LimitReached);
        let verdict = Verdict::NOTHING_TO_ASK;
        let sold = units(&[Units(3), Units(1), limit, Units(1), Units(0)], 4, verdict);
        assert_eq!(
            sold,
            [
                Unit::Sold {
                    remaining: 2,
                    verdict
                },
                Unit::Refused(Refusal::LimitReached),
                Unit::Sold {
                    remaining: 1,
                    verdict
                },
                Unit::SoldOut
            ]
        );
        // Below zero is a stock (two holders under a broken lock sold the last unit).
        assert_eq!(units(&[Units(-4), Units(0)], 1, verdict), [Unit::SoldOut]);
        assert_eq!(units(&[], 2, verdict), [Unit::NotForSale; 2]);
    }
}
