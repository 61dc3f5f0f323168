//! `lua` — one script checks and decrements atomically and records the order; no lock.
//!
//! Correct, and the goodput ceiling the lock variants are measured against.
//!
//! Every deduction is one unit, taken or not by `lua/deduct.lua` inside Redis. What is
//! shared is the trip there: while an instance's call for a product is in flight, the
//! deductions that arrive for it wait, and go together in its next call (group commit).
//! Under load that turns a hundred round trips into a few, and a lone request goes at
//! once. The round trip, not the script, is most of what a deduction costs (see
//! PERFORMANCE.md); `batch=off` sends each deduction on its own, to show it.

use std::sync::Arc;

use futures_util::future::join_all;
use redis::RedisError;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::{Deduction, Outcome, ReplicaWait, Variant};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::scripts;
use crate::store::RedisConn;

/// Most deductions in one call. Past a few dozen, a bigger call saves nothing more.
pub const MAX_BATCH: usize = 128;

pub async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shard = d.whole_stock();
    let index = shard.index;
    let order = Uuid::now_v7().to_string();
    let taken = if d.knobs.batch {
        d.lua.deduct(shard, order.clone()).await?
    } else {
        call(&mut d.redis.clone(), &d.instance, &shard, &[&order], d.wait)
            .await
            .map(|sold| sold.of(0))?
    };
    match taken {
        Taken::NotForSale => Err(d.not_for_sale().await),
        Taken::SoldOut => Ok(Outcome::SoldOut { remaining: 0 }),
        Taken::Unit { remaining } => Ok(Outcome::Deducted {
            remaining,
            order,
            shard: index,
        }),
        Taken::Unconfirmed => Ok(Outcome::Unconfirmed {
            order,
            shard: index,
        }),
    }
}

/// What one deduction got from a call of the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    Unit {
        remaining: i64,
    },
    /// A unit taken and recorded, that too few replicas confirmed in time.
    Unconfirmed,
    SoldOut,
    NotForSale,
}

/// What the script answered for a call: the stock before it, and how many units it sold
/// (to the first deductions of the call); `None` when the product has no stock key. And
/// whether the replicas asked for confirmed the call's sales.
#[derive(Debug, Clone, Copy)]
struct Sold {
    script: Option<(i64, i64)>,
    confirmed: bool,
}

impl Sold {
    /// What the `i`-th deduction of the call (from 0) got.
    fn of(self, i: usize) -> Taken {
        let Some((before, sold)) = self.script else {
            return Taken::NotForSale;
        };
        let i = i as i64;
        if i >= sold {
            Taken::SoldOut
        } else if !self.confirmed {
            Taken::Unconfirmed
        } else {
            Taken::Unit {
                remaining: before - i - 1,
            }
        }
    }
}

/// Runs `deduct.lua` for `orders`, in that order, on one shard; with `wait`, one `WAIT` for
/// the replicas covers every sale of the call.
async fn call(
    redis: &mut RedisConn,
    instance: &str,
    shard: &ShardKeys,
    orders: &[&str],
    wait: Option<ReplicaWait>,
) -> Result<Sold, RedisError> {
    let mut script = scripts::DEDUCT.prepare_invoke();
    script
        .key(&shard.stock)
        .key(&shard.orders)
        .key(&shard.audit)
        .arg(instance)
        .arg(Variant::Lua.name());
    for order in orders {
        script.arg(*order);
    }
    let result: Option<(i64, i64)> = script.invoke_async(redis).await?;
    let sold = result.map_or(0, |(_, sold)| sold);
    let confirmed =
        sold == 0 || ReplicaWait::confirm(wait, redis, &shard.stock, &shard.audit, sold).await;
    Ok(Sold {
        script: result,
        confirmed,
    })
}

/// A deduction waiting for its call.
struct Waiting {
    shard: ShardKeys,
    order: String,
    answer: oneshot::Sender<Result<Taken, RedisError>>,
}

/// The instance's queue of lua deductions, and the task that sends them to Redis.
#[derive(Clone)]
pub struct LuaBatches {
    queue: mpsc::Sender<Waiting>,
}

impl LuaBatches {
    /// Starts the sending task. `capacity` bounds the queue (requests past it wait to
    /// join it); the instance's in-flight limit keeps it well below that.
    pub fn start(
        redis: RedisConn,
        instance: Arc<str>,
        capacity: usize,
        wait: Option<ReplicaWait>,
    ) -> Self {
        let (queue, arrived) = mpsc::channel(capacity.max(1));
        tokio::spawn(send_batches(arrived, redis, instance, wait));
        Self { queue }
    }

    async fn deduct(&self, shard: ShardKeys, order: String) -> Result<Taken, AppError> {
        let (answer, answered) = oneshot::channel();
        let waiting = Waiting {
            shard,
            order,
            answer,
        };
        let gone = || AppError::Internal(anyhow::anyhow!("the lua batch task stopped"));
        self.queue.send(waiting).await.map_err(|_| gone())?;
        Ok(answered.await.map_err(|_| gone())??)
    }
}

/// Takes whatever has arrived (at least one deduction, at most [`MAX_BATCH`]), sends one
/// call per product, all at once, and waits for them before taking the next lot: what
/// arrives meanwhile is the next lot.
async fn send_batches(
    mut arrived: mpsc::Receiver<Waiting>,
    redis: RedisConn,
    instance: Arc<str>,
    wait: Option<ReplicaWait>,
) {
    let mut lot = Vec::with_capacity(MAX_BATCH);
    while arrived.recv_many(&mut lot, MAX_BATCH).await > 0 {
        // A request that is gone (its client hung up, or it timed out) sells nothing.
        lot.retain(|w: &Waiting| !w.answer.is_closed());
        let mut by_shard: Vec<Vec<Waiting>> = Vec::new();
        for waiting in lot.drain(..) {
            match by_shard
                .iter_mut()
                .find(|b| b[0].shard.stock == waiting.shard.stock)
            {
                Some(batch) => batch.push(waiting),
                None => by_shard.push(vec![waiting]),
            }
        }
        if by_shard.len() == 1 {
            let batch = by_shard.pop().expect("one batch");
            send(redis.clone(), &instance, batch, wait).await;
        } else {
            // One call per shard, each on its own slot, all at once.
            let sends = by_shard.into_iter();
            join_all(sends.map(|batch| send(redis.clone(), &instance, batch, wait))).await;
        }
    }
}

async fn send(
    mut redis: RedisConn,
    instance: &str,
    batch: Vec<Waiting>,
    wait: Option<ReplicaWait>,
) {
    let orders: Vec<&str> = batch.iter().map(|w| w.order.as_str()).collect();
    let sold = call(&mut redis, instance, &batch[0].shard, &orders, wait).await;
    for (i, waiting) in batch.into_iter().enumerate() {
        let _ = waiting
            .answer
            .send(sold.as_ref().map(|s| s.of(i)).map_err(Clone::clone));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_deductions_of_a_call_get_the_units_it_sold() {
        let answer = |script, confirmed| Sold { script, confirmed };
        let sold = answer(Some((3, 2)), true);
        assert_eq!(sold.of(0), Taken::Unit { remaining: 2 });
        assert_eq!(sold.of(1), Taken::Unit { remaining: 1 });
        assert_eq!(sold.of(2), Taken::SoldOut);
        assert_eq!(answer(Some((-4, 0)), true).of(0), Taken::SoldOut);
        assert_eq!(answer(None, true).of(0), Taken::NotForSale);
        let unconfirmed = answer(Some((3, 2)), false);
        assert_eq!(unconfirmed.of(1), Taken::Unconfirmed);
        assert_eq!(unconfirmed.of(2), Taken::SoldOut);
    }
}
