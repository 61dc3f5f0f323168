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

mod batches;

pub use batches::LuaBatches;

use uuid::Uuid;

use super::{Deduction, Outcome, Spec, Start};
use crate::error::AppError;
use crate::knobs::{Kind, Knob};
use crate::outcome::sale::{Taken, Verdict};
use crate::scripts::{self, Refusal};
use crate::store::RedisMode;
use batches::{Line, call, first_unit};

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
        Unit::Sold { remaining, verdict } => {
            let taken = Taken {
                order,
                shard: index,
                remaining: Some(remaining),
            };
            Ok(match verdict.of(taken) {
                Ok(confirmed) => Outcome::Deducted(confirmed),
                Err(taken) => Outcome::Unconfirmed(taken),
            })
        }
        Unit::Refused(why) => Box::pin(d.refused(why)).await,
    }
}

/// One deduction as the script takes it.
#[derive(Debug)]
struct Batched {
    order: String,
    /// The buyer, or `""`.
    user: String,
    /// The holder, `""` without a key.
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
            // The script reads the holder only to check a key's claim.
            holder: if key.is_empty() {
                String::new()
            } else {
                d.holder.to_string()
            },
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
    /// A unit taken and recorded; whether the replicas asked for have it is the call's
    /// `verdict`.
    Sold {
        remaining: i64,
        verdict: Verdict,
    },
    SoldOut,
    NotForSale,
    /// The buyer has their limit, or the product has one and no buyer was named; the key
    /// is another request's now; the sale was voided.
    Refused(Refusal),
}
