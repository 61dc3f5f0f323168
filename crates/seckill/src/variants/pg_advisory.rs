//! `pg_advisory` — PostgreSQL's own lock: `pg_advisory_xact_lock(key)` in a transaction
//! held open across the work, the lock's name hashed to its key. Waiters queue inside
//! PostgreSQL (no polling), each on a connection of its own (`--pg-connections` bounds
//! them), and a wait that runs out is the transaction's `lock_timeout`. The lock goes with
//! the transaction: `COMMIT` gives it back, and a holder whose connection dies — its
//! process killed, or `fault=abandon` closing it — frees it at once. No lease, so no
//! second holder for slow work; but a holder cut off from PostgreSQL (a network partition)
//! loses the lock while it still works, which only `fence=on` catches at the stock.

use super::fault;
use super::in_database;
use super::section::{self, FourTrips, LockStore};
use super::{Deduction, Outcome, Spec};
use crate::database::locks::AdvisoryLock;
use crate::error::AppError;
use crate::knobs::{DEFAULT_LOCK_WAIT_MS, FAULT, FENCE, PAUSE_MS, WAIT_MS, WORK_MS};

pub static SPEC: Spec = Spec {
    name: "pg_advisory",
    summary: "PostgreSQL's advisory lock in a transaction held across the work: waiters queue in the database, a dead holder's connection frees it at once",
    color: "#8d6e63",
    knobs: &[
        WORK_MS,
        WAIT_MS.defaulting_to(DEFAULT_LOCK_WAIT_MS),
        FAULT,
        PAUSE_MS,
        FENCE,
    ],
    in_progression: false,
    splits_stock: false,
    whole_stock: true,
    stock_in_database: false,
    must_finish: true,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
};

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let db = in_database::database(d)?;
    let shard = d.whole_stock();
    let lock = AdvisoryLock::new(db.clone(), &shard.lock, &d.holder);
    section::under_lock(
        d,
        &shard,
        FourTrips::new(fault::pausing(d, lock), LockStore::OwnServers),
        d.knobs.wait(),
    )
    .await
}
