//! `pg_unique` — seed 003's first row: the lock is a row in PostgreSQL (`seckill_locks`,
//! a unique key on the lock's name). `INSERT` takes it, a unique violation means held and
//! the waiter polls (the seed: no blocking wait), `DELETE … WHERE holder = me` gives it
//! back. The stock stays in the stock store; only the lock store differs from `setnx`.
//!
//! A holder that dies (`fault=abandon`, or its process killed) leaves its row, and every
//! later request waits out its `wait_ms` and is answered 429 — the product is deadlocked
//! until `POST /admin/unlock` (or a `DELETE` by hand), exactly as `setnx`'s key. With
//! `lease_ms` the row carries `lock_until` and a waiter takes over a row past it
//! (ShedLock's JDBC provider, Spring's `JdbcLockRegistry`): the deadlock ends after the
//! lease, and a holder whose work outlasts it has a second holder beside it — which only
//! `fence=on` keeps from selling.

use super::fault;
use super::in_database;
use super::section::{self, FourTrips, LockStore};
use super::{Deduction, Outcome, Spec};
use crate::database::locks::UniqueLock;
use crate::error::AppError;
use crate::knobs::{DEFAULT_LOCK_WAIT_MS, FAULT, FENCE, LEASE_MS, PAUSE_MS, WAIT_MS, WORK_MS};

pub static SPEC: Spec = Spec {
    name: "pg_unique",
    summary: "the lock is a row with a unique key in PostgreSQL (INSERT to lock, DELETE to unlock): a dead holder deadlocks the product; lease_ms adds lock_until and a takeover",
    color: "#5d4037",
    knobs: &[
        WORK_MS,
        WAIT_MS.defaulting_to(DEFAULT_LOCK_WAIT_MS),
        LEASE_MS,
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
    let lease = d.knobs.millis(&LEASE_MS);
    let lock = UniqueLock::new(db.clone(), &shard.lock, &d.holder, lease);
    section::under_lock(
        d,
        &shard,
        FourTrips::new(fault::pausing(d, lock), LockStore::OwnServers),
        d.knobs.wait(),
    )
    .await
}
