//! `zookeeper` — the lock on a ZooKeeper ensemble (`--zookeeper-urls`), the consensus store
//! the seeds compare Redis with; the stock stays in the stock store.
//!
//! Curator's recipe (`seckill_lock::zookeeper`): a queue of ephemeral sequential nodes under
//! `/seckill/locks/<product>`, each waiter watching the node before its own. A grant is a
//! write a majority of the ensemble has logged, so killing the leader right after it granted
//! the lock gives it to nobody else. The session is the lease: an instance paused past its
//! session timeout (`--zookeeper-session-ms`) loses its locks to the next in line, and only
//! `fence=on` — the lock node's creation zxid checked at the stock — keeps the paused
//! holder from selling when it wakes. `fault=stop_before_commit&pause_ms=…` (with
//! `--faults`) makes that pause: the whole process stops between the holder's last check
//! and its commit, so it cannot have noticed. The ensemble electing a leader answers 503
//! `lock_store_unavailable` until it has one.

use super::section::{self, FourTrips, LockStore};
use super::{Deduction, Outcome, Spec};
use crate::error::AppError;
use crate::knobs::{DEFAULT_LOCK_WAIT_MS, FENCE, PAUSE_MS, STOP_FAULT, WAIT_MS, WORK_MS};

pub static SPEC: Spec = Spec {
    name: "zookeeper",
    summary: "the lock on a ZooKeeper ensemble (--zookeeper-urls): Curator's recipe, the session as lease, the zxid as fencing token",
    color: "#00695c",
    knobs: &[
        WORK_MS,
        WAIT_MS.defaulting_to(DEFAULT_LOCK_WAIT_MS),
        FENCE,
        STOP_FAULT,
        PAUSE_MS,
    ],
    in_progression: false,
    splits_stock: false,
    whole_stock: true,
    stock_in_database: false,
    must_finish: true,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
};

/// Where a product's lock lives in the ensemble: `InterProcessMutex(client, this)` in Java.
pub fn lock_path(product: &str) -> String {
    format!("/seckill/locks/{product}")
}

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let Some(zookeeper) = &d.app.zookeeper else {
        return Err(AppError::NotConfigured(
            "zookeeper has no ensemble: start the instance with --zookeeper-urls host:port,…"
                .into(),
        ));
    };
    let shard = d.whole_stock();
    let lock = zookeeper.lock_as(&lock_path(d.product.product.as_str()), &d.holder);
    section::under_lock(
        d,
        &shard,
        FourTrips::new(lock, LockStore::OwnServers),
        d.knobs.wait(),
    )
    .await
}
