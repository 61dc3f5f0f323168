//! What a sale's script answers, in one place for every variant: the sale as the commit
//! scripts take it, a unit sold (confirmed with replicas, `--redis-wait-replicas`), a
//! refusal, and why a product is not for sale.

use uuid::Uuid;

use super::{Deduction, Outcome};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::outcome::sale::{self, Taken};
use crate::scripts::{self, Credentials, Refusal, Reply, StockWrite};

impl Deduction {
    /// Why there was no stock key: a product split into shards is sold by the variants
    /// that split stock only; any other product was never reset (or Redis lost it) and is
    /// not for sale.
    pub async fn not_for_sale(&self) -> AppError {
        let meta: Result<(Option<u32>, Option<String>), _> = redis::cmd("HMGET")
            .arg(&self.product.meta)
            .arg("shards")
            .arg("stock_in")
            .query_async(&mut self.redis())
            .await;
        let product = &self.product.product;
        match meta {
            // Its stock is a row in the database.
            Ok((_, Some(stock_in))) if stock_in == "postgres" => AppError::BadRequest(format!(
                "product {product} keeps its stock in PostgreSQL (stock_in postgres): only {} \
                 sells it",
                variants_that(|spec| spec.stock_in_database)
            )),
            Ok((Some(n), _)) if n > 1 => AppError::BadRequest(format!(
                "product {product} is split into {n} shards; only {} sells it",
                variants_that(|spec| spec.splits_stock)
            )),
            Ok(_) => AppError::UnknownProduct(product.to_string()),
            Err(err) => err.into(),
        }
    }

    /// Takes one unit, records the order and leaves the critical section, in one round trip.
    pub(super) async fn commit(
        &self,
        shard: &ShardKeys,
        write: StockWrite,
        credentials: Credentials<'_>,
    ) -> Result<Outcome, AppError> {
        let order = Uuid::now_v7().to_string();
        let reply: Reply = scripts::commit(&self.sale(shard, &order), write, credentials)
            .invoke_async(&mut self.redis())
            .await?;
        self.lost.answered();
        match reply {
            Reply::Units(remaining) => Ok(self.sold(shard, order, remaining).await),
            Reply::Refused(why) => self.refused(why).await,
        }
    }

    /// This deduction's sale from `shard`, recorded as `order`, as the commit scripts take
    /// it; noted as sent (`Lost::sending`), since it is about to be.
    pub(super) fn sale<'a>(&'a self, shard: &'a ShardKeys, order: &'a str) -> scripts::Sale<'a> {
        self.lost.sending(shard, order);
        scripts::Sale {
            shard,
            holder: &self.holder,
            order,
            instance: &self.app.settings.instance,
            variant: self.variant.name(),
            user: self.user(),
            keyed: self.claim.as_ref().map(|claim| claim.key.as_str()),
            // Whether the sale leaves the key's claim alone: it lives on another slot (a
            // split product's shard), or its answer comes after the sale (a cart).
            split: self.claim.as_ref().is_some_and(|claim| {
                self.answers_after_sale() || claim.record() != shard.claim(claim.key.as_str())
            }),
            trace: self.timeline.leaving(),
        }
    }

    /// What a script's refusal to sell answers: every variant's, in one place.
    pub(super) async fn refused(&self, why: Refusal) -> Result<Outcome, AppError> {
        match why {
            Refusal::Gone => Err(self.not_for_sale().await),
            // A reset since the holder entered gave its lock up, as an operator deleting it
            // would: nothing was sold, retrying is safe (in the new sale).
            Refusal::LockLost | Refusal::Reset => Ok(Outcome::LockLost),
            Refusal::Fenced => Ok(Outcome::Fenced),
            Refusal::LimitReached => Ok(Outcome::LimitReached),
            Refusal::UserRequired => Err(AppError::BadRequest(format!(
                "product {} limits the units one buyer may have: name the buyer with user",
                self.product.product
            ))),
            // Another request serves the key now, or this sale was given up for unsold:
            // either way, another request's answer is the one that counts.
            Refusal::TakenOver | Refusal::Voided => Ok(Outcome::InFlight),
            // The share's units went back to the pool: `shares` tries again before this.
            Refusal::ShareGone => Ok(Outcome::LockBusy),
        }
    }

    /// A unit sold and recorded: a 200, once as many replicas as asked for have it.
    pub(super) async fn sold(&self, shard: &ShardKeys, order: String, remaining: i64) -> Outcome {
        let taken = Taken {
            order,
            shard: shard.index,
            remaining: Some(remaining),
        };
        let confirm = self.app.sale_confirmations.as_ref();
        match sale::confirm(confirm, &mut self.redis(), shard, taken).await {
            Ok(confirmed) => Outcome::Deducted(confirmed),
            Err(taken) => Outcome::Unconfirmed(taken),
        }
    }
}

/// The variants whose spec says `which`, by name: "the segmented variant", "the
/// pg_update, pg_for_update or pg_version variant".
fn variants_that(which: fn(&super::Spec) -> bool) -> String {
    let names: Vec<&str> = super::VARIANTS
        .iter()
        .filter(|v| which(v.spec()))
        .map(|v| v.name())
        .collect();
    match names.split_last() {
        Some((last, [])) => format!("the {last} variant"),
        Some((last, others)) => format!("the {} or {last} variant", others.join(", ")),
        None => "no variant".into(),
    }
}
