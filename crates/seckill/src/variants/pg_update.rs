//! `pg_update` — the stock in a PostgreSQL row, sold by one conditional statement:
//! `UPDATE seckill_stock SET stock = stock - 1 WHERE product = $1 AND stock > 0`, the
//! order inserted by the same statement. The database's counterpart of `lua`: no lock
//! but the row's own, held for the statement; every sale waits its turn on that one row
//! — how hot it gets, against `lua`, is seed 003's table's first figure (`--suite seed003`).
//!
//! Sells a product reset with `"stock_in": "postgres"`; the audit counts its sales and
//! what is left from the database itself. A statement whose answer was lost (PostgreSQL
//! paused past the timeout, the connection dropped) is looked up by its order id; if the
//! database cannot say, the answer is 504 `unknown`, never a "no".

use super::in_database;
use super::{Deduction, Outcome, Spec};
use crate::error::AppError;

pub static SPEC: Spec = Spec {
    name: "pg_update",
    summary: "the stock in a PostgreSQL row: UPDATE … SET stock = stock - 1 WHERE stock > 0, the order in the same statement (the database's lua)",
    color: "#1565c0",
    knobs: &[],
    in_progression: false,
    splits_stock: false,
    whole_stock: true,
    stock_in_database: true,
    // One statement: cut short, it is a lost answer like any other, and looked up.
    must_finish: true,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
};

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let db = in_database::database(d)?;
    let epoch = in_database::epoch(d).await?;
    let order = uuid::Uuid::now_v7().to_string();
    let sold = db.sell_by_update(&in_database::row(d, epoch, &order)).await;
    in_database::answer(d, db, sold, order).await
}
