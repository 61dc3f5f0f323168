//! `naive` — GET the stock, and if it is positive SET it to stock-1 from the application.
//!
//! Two requests that read the same value both write the same value back: one sale is
//! lost from the stock (a lost update), and once the stock has run out on paper more
//! units have been sold than there were (oversell).

use redis::AsyncCommands;

use super::section::{Credentials, StockWrite};
use super::{Deduction, Outcome, Spec};
use crate::error::AppError;
use crate::knobs::WORK_MS;

pub static SPEC: Spec = Spec {
    name: "naive",
    summary: "GET, then SET stock-1 from the application: lost updates and oversell",
    color: "#c62828",
    knobs: &[WORK_MS],
    in_progression: true,
    splits_stock: false,
    must_finish: false,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
    start: None,
};

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shard = d.whole_stock();
    let stock: Option<i64> = d.redis().get(&shard.stock).await?;
    let Some(stock) = stock else {
        return Err(d.not_for_sale().await);
    };
    if stock <= 0 {
        return Ok(Outcome::SoldOut { remaining: stock });
    }
    d.work().await;
    d.commit(&shard, StockWrite::Set(stock - 1), Credentials::default())
        .await
}
