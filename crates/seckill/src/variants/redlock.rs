//! `redlock` — the lock taken on a majority of 3 or 5 independent Redis masters
//! (`--redlock-urls`), as the Redis docs describe Redlock; the stock stays in the stock
//! store.
//!
//! Correct while a majority of the lock servers is up and keeps its data; losing a
//! minority changes nothing. With no `ttl_ms` the lock is extended by quorum while the
//! work runs, and a holder whose extension missed the quorum does not commit (`503
//! lock_lost`). With `ttl_ms` shorter than the work, the lock expires under its holder as
//! the token lock's does.

use super::section::{self, FourTrips, LockStore};
use super::{Deduction, Outcome, Spec};
use crate::error::AppError;
use crate::knobs::{DEFAULT_LOCK_WAIT_MS, FAULT, FENCE, TTL_MS, WAIT_MS, WORK_MS};

pub static SPEC: Spec = Spec {
    name: "redlock",
    summary: "the lock on a majority of 3 or 5 independent masters (--redlock-urls)",
    color: "#5d4037",
    knobs: &[
        WORK_MS,
        TTL_MS,
        WAIT_MS.defaulting_to(DEFAULT_LOCK_WAIT_MS),
        FAULT,
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
    let Some(redlock) = &d.app.redlock else {
        return Err(AppError::NotConfigured(
            "redlock has no servers: start the instance with --redlock-urls (3 or 5)".into(),
        ));
    };
    let shard = d.whole_stock();
    let ttl = d.knobs.millis(&TTL_MS);
    let lease = d.app.locks.default_lease();
    let lock = redlock
        .lock_as(&shard.lock, ttl.unwrap_or(lease), &d.holder)
        .extending(ttl.is_none());
    section::under_lock(
        d,
        &shard,
        FourTrips::new(lock, LockStore::OwnServers),
        d.knobs.wait(),
    )
    .await
}
