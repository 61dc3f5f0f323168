//! One deduction: the instance it runs on, the variant, the product, the request's knobs
//! and who the request is.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use redis::AsyncCommands;

use super::lost::{Sending, Then};
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
    /// The sale sent and not yet answered ([`Deduction::sending`]).
    pub(super) sending: Mutex<Option<Sending>>,
    /// The sale whose answer was lost and could not be looked up ([`Deduction::learn`]).
    pub(super) unsettled: Mutex<Option<Sending>>,
    /// What waits for it to be looked up ([`Deduction::after_settled`]).
    pub(super) thens: Mutex<Vec<Then>>,
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
            sending: Mutex::new(None),
            unsettled: Mutex::new(None),
            thens: Mutex::new(Vec::new()),
        }
    }

    /// Runs the variant; a sale whose answer was lost is looked up (`Deduction::learn`,
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
            Err(err) if err.answer_may_be_lost() => Box::pin(self.learn(Err(err))).await,
            outcome => outcome,
        };
        self.settle_later();
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

    /// The products of this request's cart (`multi`), when it has more than one.
    fn cart(&self) -> Option<&[crate::keys::ProductId]> {
        let cart = self.knobs.products(&super::multi::PRODUCTS);
        (cart.len() > 1).then_some(cart)
    }

    /// Whether its idempotency key's claim gets its answer after the sale rather than from
    /// the sale's script: the request sells elsewhere than on the claim's slot (a split
    /// product's shard), or in several steps (a cart).
    pub fn answers_after_sale(&self) -> bool {
        self.variant.spec().splits_stock || self.cart().is_some()
    }

    /// Where the request may sell under its key besides its claim's own slot, for a repeat
    /// that takes the claim over to fence ([`idempotency::claim_for`]).
    ///
    /// [`idempotency::claim_for`]: crate::idempotency::claim_for
    pub async fn elsewhere(&self) -> Result<Elsewhere, AppError> {
        if let Some(cart) = self.cart() {
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
