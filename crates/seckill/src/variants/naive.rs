//! `naive` — GET the stock, and if it is positive SET it to stock-1 from the application.
//!
//! Two requests that read the same value both write the same value back: one sale is
//! lost from the stock (a lost update), and once the stock has run out on paper more
//! units have been sold than there were (oversell).

use redis::AsyncCommands;

use super::{Deduction, Guard, Outcome, Take};
use crate::error::AppError;

pub async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shard = d.whole_stock();
    let stock: Option<i64> = d.redis.clone().get(&shard.stock).await?;
    let Some(stock) = stock else {
        return Err(d.not_for_sale().await);
    };
    if stock <= 0 {
        return Ok(Outcome::SoldOut { remaining: stock });
    }
    d.work().await;
    d.commit(&shard, Take::Set(stock - 1), Guard::default())
        .await
}
