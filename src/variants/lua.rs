//! `lua` — one script checks and decrements atomically and records the order; no lock.
//!
//! Correct, and the goodput ceiling the lock variants are measured against.

use uuid::Uuid;

use super::{Deduction, Outcome};
use crate::error::AppError;
use crate::scripts;

pub async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shard = d.whole_stock();
    let order = Uuid::now_v7().to_string();
    let remaining: i64 = scripts::DEDUCT
        .key(&shard.stock)
        .key(&shard.orders)
        .key(&shard.audit)
        .arg(&order)
        .arg(&*d.instance)
        .arg(d.variant.name())
        .invoke_async(&mut d.redis.clone())
        .await?;
    match remaining {
        -2 => Err(d.not_for_sale().await),
        -1 => Ok(Outcome::SoldOut { remaining: 0 }),
        remaining => Ok(Outcome::Deducted {
            remaining,
            order,
            shard: shard.index,
        }),
    }
}
