//! One deduction: the request's facts — the instance it runs on, the variant, the
//! product, the request's knobs and who the request is — and [`Deduction::run`], its one
//! path: the variant's `deduct` (a lock variant's through the lock sequence, `section.rs`),
//! a lost answer looked up (`lost/`), the refusals counted. What a sale's answer comes
//! to is `sale.rs`'s, the only other file with methods of `Deduction`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use redis::AsyncCommands;

use super::lost::{self, Lost};
use super::{Context, Outcome, Variant};
use crate::error::AppError;
use crate::idempotency::{Claim, Elsewhere};
use crate::keys::{ProductKeys, ShardKeys};
use crate::knobs::Knobs;
use crate::store::RedisConn;
use crate::trace::Timeline;

/// Everything one deduction needs.
pub struct Deduction {
    /// The instance: its stores, locks, settings and metrics.
    pub app: Arc<Context>,
    pub variant: Variant,
    pub product: Arc<ProductKeys>,
    pub knobs: Knobs,
    /// Who this request is, in locks and in the audit.
    pub holder: seckill_lock::HolderId,
    /// The claim on the request's idempotency key, when it carries one.
    pub claim: Option<Claim>,
    /// How long the work really took, µs (0 until it ran): `work_ms` is what was asked.
    pub(super) worked_us: AtomicU64,
    /// This holder on the product's timeline, when it is traced.
    pub timeline: Timeline,
    /// A split product's unit reserved for the buyer under this holder's id
    /// (`lua/reserve.lua`), which a sale that never ran gives back.
    pub reserved: AtomicBool,
    /// A sale whose answer may be lost: the one in flight, the one left to look up later.
    pub(crate) lost: Lost,
}

impl Deduction {
    pub fn new(app: Arc<Context>, variant: Variant, knobs: Knobs) -> Self {
        Self {
            holder: app.holders.next(),
            product: app.keys.product(&knobs.product),
            claim: None,
            app,
            variant,
            knobs,
            worked_us: AtomicU64::new(0),
            timeline: Timeline::default(),
            reserved: AtomicBool::new(false),
            lost: Lost::default(),
        }
    }

    /// Runs the variant; a sale whose answer was lost is looked up (`lost::learn`,
    /// and later when Redis does not answer now). Counts the requests that sold nothing in
    /// the product's audit (unless the variant's script counts its own), so that `/stats`
    /// accounts for every answer.
    pub async fn run(&self) -> Result<Outcome, AppError> {
        let spec = self.variant.spec();
        // The rare paths are boxed: inline, their futures would make every request's
        // several kilobytes larger, moved at each await.
        let outcome = match self.knobs.choice(&super::close_guard::GUARD) {
            None => (spec.deduct)(self).await,
            Some(guard) => Box::pin(super::close_guard::guarded(self, guard == "rw")).await,
        };
        let outcome = match outcome {
            Err(err) if err.answer_may_be_lost() => Box::pin(lost::learn(self, Err(err))).await,
            outcome => outcome,
        };
        lost::settle_later(self);
        let outcome = outcome?;
        if let Some(counter) = outcome.refusal_counter()
            && !spec.counts_its_refusals
        {
            let _: i64 = self
                .redis()
                .hincr(&self.product.audit, counter.field(), 1)
                .await?;
        }
        Ok(outcome)
    }

    /// The buyer the request named, or `""`.
    pub fn user(&self) -> &str {
        self.knobs.user.as_ref().map_or("", |u| u.as_str())
    }

    /// The stock store's connection.
    pub fn redis(&self) -> RedisConn {
        self.app.store.conn()
    }

    /// The lock store's connection.
    pub fn lock_redis(&self) -> RedisConn {
        self.app.lock_store.conn()
    }

    /// The keys of an unsplit product.
    pub fn whole_stock(&self) -> Arc<ShardKeys> {
        self.product.whole()
    }

    /// How long the work really took, when there was any (`section::work`).
    pub fn worked(&self) -> Option<Duration> {
        match self.worked_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// What this holder says of itself as it enters, on the product's timeline (used only
    /// if the product is traced), its lock granted with `lease`.
    pub(super) fn entering(&self, lease: Option<Duration>) -> String {
        self.timeline
            .entering(&self.app.settings.instance, self.variant.name(), lease)
    }

    /// Whether its idempotency key's claim gets its answer after the sale rather than from
    /// the sale's script: the request sells elsewhere than on the claim's slot (a split
    /// product's shard), or in several steps (a cart).
    pub fn answers_after_sale(&self) -> bool {
        self.variant.spec().splits_stock || self.knobs.cart().is_some()
    }

    /// Where the request may sell under its key besides its claim's own slot, for a repeat
    /// that takes the claim over to fence ([`idempotency::claim_for`]).
    ///
    /// [`idempotency::claim_for`]: crate::idempotency::claim_for
    pub async fn elsewhere(&self) -> Result<Elsewhere, AppError> {
        if let Some(cart) = self.knobs.cart() {
            let lines = cart
                .iter()
                .map(|p| ShardKeys::clone(&ProductKeys::new(p).whole()))
                .collect();
            return Ok(Elsewhere::Cart(lines));
        }
        if !self.variant.spec().splits_stock {
            return Ok(Elsewhere::Nowhere);
        }
        // One shard too: its sale script neither checks nor answers the claim (the stock is
        // split, if into one part), so only a fence finds the sale an old request made.
        let layout = crate::product::layout(&self.app.store, &self.product.product).await?;
        let shards = (0..layout.shards())
            .map(|index| self.product.shard(&layout, index))
            .collect();
        Ok(Elsewhere::Shards(shards))
    }
}
