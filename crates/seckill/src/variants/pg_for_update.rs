//! `pg_for_update` — the stock in a PostgreSQL row, and the row lock as the lock: `BEGIN`,
//! `SELECT stock … FOR UPDATE` (waiting up to `wait_ms`, the transaction's
//! `lock_timeout`), the seed's check, the work, `UPDATE` to the stock read minus one and the
//! order's `INSERT`, `COMMIT`. The seed's `GET`-then-`SET`, made safe by the row lock; what
//! the lock costs with work inside is the row's hold time.
//!
//! A holder whose connection dies frees the row at once (PostgreSQL rolls its
//! transaction back). A `COMMIT` whose answer was lost is looked up by its order id.

use super::{Deduction, Outcome, Spec};
use super::{in_database, section};
use crate::database::stock::Sold;
use crate::error::AppError;
use crate::knobs::{DEFAULT_LOCK_WAIT_MS, WAIT_MS, WORK_MS};

pub static SPEC: Spec = Spec {
    name: "pg_for_update",
    summary: "the stock in a PostgreSQL row, SELECT … FOR UPDATE as the lock: check, work, UPDATE, COMMIT",
    color: "#0277bd",
    knobs: &[WORK_MS, WAIT_MS.defaulting_to(DEFAULT_LOCK_WAIT_MS)],
    in_progression: false,
    splits_stock: false,
    whole_stock: true,
    stock_in_database: true,
    // Cut short, its transaction would end with its connection: safe, but a lost answer.
    must_finish: true,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
};

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let db = in_database::database(d)?;
    let epoch = in_database::epoch(d).await?;
    let product = d.product.product.as_str();
    let Some((row_lock, row)) = db.lock_row(product, epoch, d.knobs.wait()).await? else {
        return Ok(Outcome::LockBusy);
    };
    let Some(row) = row else {
        row_lock.leave().await?;
        return Err(in_database::no_row(d));
    };
    if row.stock <= 0 {
        row_lock.leave().await?;
        return Ok(Outcome::SoldOut {
            remaining: row.stock,
        });
    }
    section::work(d).await;
    let order = uuid::Uuid::now_v7().to_string();
    let sold = row_lock
        .sell(&in_database::row(d, epoch, &order), row)
        .await
        .map(Sold::Units);
    in_database::answer(d, db, sold, order).await
}
