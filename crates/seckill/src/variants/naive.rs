//! `naive` — GET the stock, and if it is positive SET it to stock-1 from the application.
//!
//! Two requests that read the same value both write the same value back: one sale is
//! lost from the stock (a lost update), and once the stock has run out on paper more
//! units have been sold than there were (oversell).
//!
//! The per-user limit the same way: it reads how many units the buyer has, and if that is
//! below `per_user` it goes on — so several clicks of one buyer at once all pass the check
//! before any of them is recorded, and `/stats` shows the buyer `over_limit`.

use super::section;
use super::{Deduction, Outcome, Spec};
use crate::error::AppError;
use crate::knobs::WORK_MS;
use crate::scripts::{Credentials, Refusal, StockWrite};

pub static SPEC: Spec = Spec {
    name: "naive",
    summary: "GET, then SET stock-1 from the application: lost updates and oversell",
    color: "#c62828",
    knobs: &[WORK_MS],
    in_progression: true,
    splits_stock: false,
    whole_stock: true,
    stock_in_database: false,
    must_finish: false,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
};

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shard = d.whole_stock();
    // One round trip: the stock, the limit and what the buyer has.
    let (stock, limit, bought): (Option<i64>, Option<i64>, Option<i64>) = redis::pipe()
        .get(&shard.stock)
        .hget(&shard.meta, "per_user")
        .hget(&shard.buyers, d.user())
        .query_async(&mut d.redis())
        .await?;
    let Some(stock) = stock else {
        return Err(d.not_for_sale().await);
    };
    if stock <= 0 {
        return Ok(Outcome::SoldOut { remaining: stock });
    }
    match limit.unwrap_or(0) {
        0 => {}
        _ if d.user().is_empty() => return d.refused(Refusal::UserRequired).await,
        limit if bought.unwrap_or(0) >= limit => return d.refused(Refusal::LimitReached).await,
        _ => {}
    }
    section::work(d).await;
    d.commit(&shard, StockWrite::Set(stock - 1), Credentials::default())
        .await
}
