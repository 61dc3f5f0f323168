//! `lua` — one script checks and decrements atomically and records the order; no lock.
//!
//! Correct, and the goodput ceiling the lock variants are measured against.
//!
//! Every deduction is one unit, taken or not by `lua/deduct.lua` inside Redis. What is
//! shared is the trip there: while an instance's call for a product is in flight, the
//! deductions that arrive for it wait, and go together in its next call (group commit;
//! with `--redis-wait-replicas`, one confirmation covers the call's sales, and the next
//! call does not wait for it).
//! Under load that turns a hundred round trips into a few, and a lone request goes at
//! once. The round trip, not the script, is most of what a deduction costs (see
//! PERFORMANCE.md); `batch=off` sends each deduction on its own, to show it.

use std::sync::Arc;

use futures_util::future::join_all;
use redis::RedisError;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::section::confirm_sales;
use super::{Deduction, Outcome, Spec, Start, VariantState};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::knobs::{Kind, Knob};
use crate::scripts;
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
    // One atomic script: if it is sent at all, it runs whole.
    must_finish: false,
    counts_its_refusals: true,
    deduct: |d| Box::pin(deduct(d)),
    start: Some(start),
};

/// Most deductions in one call. Past a few dozen, a bigger call saves nothing more.
pub const MAX_BATCH: usize = 128;

fn start(start: &Start<'_>) -> VariantState {
    let capacity = usize::try_from(start.args.limits.max_in_flight).unwrap_or(usize::MAX);
    Arc::new(LuaBatches::start(
        start.store.conn(),
        start.settings.instance.clone(),
        capacity,
        start.sale_confirmations.cloned(),
    ))
}

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shard = d.whole_stock();
    let index = shard.index;
    let order = Uuid::now_v7().to_string();
    let unit = if d.knobs.switch(&BATCH) {
        let batches: &LuaBatches = d.state()?;
        batches.deduct(shard, order.clone()).await?
    } else {
        let (instance, confirm) = (&d.app.settings.instance, d.app.sale_confirmations.clone());
        call(&mut d.redis(), instance, &shard, &[&order], confirm)
            .await
            .map(|sold| sold.of(0))?
    };
    match unit {
        Unit::NotForSale => Err(d.not_for_sale().await),
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
    fn of(self, i: usize) -> Unit {
        let Some((before, sold)) = self.script else {
            return Unit::NotForSale;
        };
        let i = i as i64;
        if i >= sold {
            Unit::SoldOut
        } else if !self.confirmed {
            Unit::Unconfirmed
        } else {
            Unit::Sold {
                remaining: before - i - 1,
            }
        }
    }
}

/// Runs `deduct.lua` for `orders`, in that order, on one shard; with `confirm`, one
/// confirmation by the replicas covers every sale of the call.
async fn call(
    redis: &mut RedisConn,
    instance: &str,
    shard: &ShardKeys,
    orders: &[&str],
    confirm: Option<Arc<Confirmations>>,
) -> Result<Sold, RedisError> {
    let script = write(redis, instance, shard, orders).await?;
    let confirmed = confirmed(confirm.as_ref(), redis, shard, script).await;
    Ok(Sold { script, confirmed })
}

/// Runs `deduct.lua` for `orders` on one shard: the stock before, and how many it sold.
async fn write(
    redis: &mut RedisConn,
    instance: &str,
    shard: &ShardKeys,
    orders: &[&str],
) -> Result<Option<(i64, i64)>, RedisError> {
    let mut script = scripts::DEDUCT.prepare_invoke();
    script
        .key(&shard.stock)
        .key(&shard.orders)
        .key(&shard.audit)
        .arg(instance)
        .arg(SPEC.name);
    for order in orders {
        script.arg(*order);
    }
    script.invoke_async(redis).await
}

/// Whether the replicas asked for have what the script sold (trivially, when it sold
/// nothing or none are asked for).
async fn confirmed(
    confirm: Option<&Arc<Confirmations>>,
    redis: &mut RedisConn,
    shard: &ShardKeys,
    script: Option<(i64, i64)>,
) -> bool {
    let sold = script.map_or(0, |(_, sold)| sold);
    sold == 0 || confirm_sales(confirm, redis, shard, sold).await
}

/// A deduction waiting for its call.
struct Waiting {
    shard: ShardKeys,
    order: String,
    answer: oneshot::Sender<Result<Unit, RedisError>>,
}

/// The instance's queue of lua deductions, and the task that sends them to Redis.
pub struct LuaBatches {
    queue: mpsc::Sender<Waiting>,
}

impl LuaBatches {
    /// Starts the sending task. `capacity` bounds the queue (requests past it wait to
    /// join it); the instance's in-flight limit keeps it well below that.
    fn start(
        redis: RedisConn,
        instance: Arc<str>,
        capacity: usize,
        confirm: Option<Arc<Confirmations>>,
    ) -> Self {
        let (queue, arrived) = mpsc::channel(capacity.max(1));
        tokio::spawn(send_batches(arrived, redis, instance, confirm));
        Self { queue }
    }

    async fn deduct(&self, shard: ShardKeys, order: String) -> Result<Unit, AppError> {
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
/// call per product, all at once, and waits for them (not for their confirmations) before
/// taking the next lot: what arrives meanwhile is the next lot.
async fn send_batches(
    mut arrived: mpsc::Receiver<Waiting>,
    redis: RedisConn,
    instance: Arc<str>,
    confirm: Option<Arc<Confirmations>>,
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
            send(redis.clone(), &instance, batch, confirm.clone()).await;
        } else {
            // One call per shard, each on its own slot, all at once.
            let sends = by_shard.into_iter();
            join_all(sends.map(|batch| send(redis.clone(), &instance, batch, confirm.clone())))
                .await;
        }
    }
}

/// Writes a batch in one call. Its answers go out at once, or, when replicas must
/// confirm, once its one confirmation is in: on a task of its own, so that the next lot
/// (this product's or another's) is written meanwhile, and a slow confirmation holds up
/// no sale but its own batch's.
async fn send(
    mut redis: RedisConn,
    instance: &str,
    batch: Vec<Waiting>,
    confirm: Option<Arc<Confirmations>>,
) {
    let orders: Vec<&str> = batch.iter().map(|w| w.order.as_str()).collect();
    let script = match write(&mut redis, instance, &batch[0].shard, &orders).await {
        Ok(script) => script,
        Err(err) => return answer(batch, Err(err)),
    };
    if confirm.is_none() {
        return answer(
            batch,
            Ok(Sold {
                script,
                confirmed: true,
            }),
        );
    }
    tokio::spawn(async move {
        let confirmed = confirmed(confirm.as_ref(), &mut redis, &batch[0].shard, script).await;
        answer(batch, Ok(Sold { script, confirmed }));
    });
}

/// Tells each deduction of `batch` what it got.
fn answer(batch: Vec<Waiting>, sold: Result<Sold, RedisError>) {
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
        assert_eq!(sold.of(0), Unit::Sold { remaining: 2 });
        assert_eq!(sold.of(1), Unit::Sold { remaining: 1 });
        assert_eq!(sold.of(2), Unit::SoldOut);
        assert_eq!(answer(Some((-4, 0)), true).of(0), Unit::SoldOut);
        assert_eq!(answer(None, true).of(0), Unit::NotForSale);
        let unconfirmed = answer(Some((3, 2)), false);
        assert_eq!(unconfirmed.of(1), Unit::Unconfirmed);
        assert_eq!(unconfirmed.of(2), Unit::SoldOut);
    }
}
