//! What a deduction may reach of its instance ([`Context`]): the stores, the locks, the
//! settings, the metrics and what each variant keeps. The instance's state
//! (`crate::state::App`) is this and what only the routes use (the orders' database).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use seckill_lock::{HolderIds, Redlock, WatchdogLocks, ZooKeeper};

use super::{Variant, VariantState};
use crate::database::Database;
use crate::keys::KeyCache;
use crate::knobs::Limits;
use crate::metrics::Metrics;
use crate::store::{Confirmations, RedisConn, Store};

/// One instance, as its deductions see it.
pub struct Context {
    /// The stock store: stock, orders, audit (and the locks, unless a lock store is
    /// named). Its connection is multiplexed and shared by every request: commands from
    /// many tasks are pipelined onto it, so Redis access never waits for a free
    /// connection. It reconnects by itself when Redis comes back (and follows a Cluster's
    /// or the sentinels' failovers).
    pub store: Store,
    /// The lock store: setnx, token, watchdog and segmented locks. The stock store
    /// itself unless `--lock-redis-url` names another.
    pub lock_store: Store,
    /// Whether the locks live in the stock store itself (no `--lock-redis-url`), so that a
    /// script can check a lock and write the stock in one step.
    pub locks_beside_stock: bool,
    /// The `redlock` variant's servers (`--redlock-urls`).
    pub redlock: Option<Redlock<ConnectionManager>>,
    /// The `zookeeper` variant's ensemble (`--zookeeper-urls`).
    pub zookeeper: Option<Arc<ZooKeeper>>,
    /// The `pg_*` variants' database (`--orders-db`, `--pg-connections`).
    pub database: Option<Arc<Database>>,
    pub settings: Settings,
    pub metrics: Metrics,
    /// Who each request is, in locks and in the audit.
    pub holders: HolderIds,
    /// The watchdog locks' shared subscription and waiter queues.
    pub locks: WatchdogLocks<RedisConn>,
    /// `--redis-wait-replicas`: replicas every sale must reach before it is answered 200.
    pub sale_confirmations: Option<Arc<Confirmations>>,
    /// `--lock-wait-replicas`: replicas of the lock store every lock must reach before its
    /// holder goes on.
    pub lock_confirmations: Option<Arc<Confirmations>>,
    /// What idempotency keys need: the stock store, their TTL, a repeat's patience.
    pub idempotency: crate::idempotency::Keys,
    /// What the variants keep per instance.
    pub variant_state: VariantState,
    /// Each product's keys, built once.
    pub keys: KeyCache,
}

/// The parts of the configuration handlers read.
#[derive(Debug)]
pub struct Settings {
    pub instance: Arc<str>,
    pub admin_token: Option<String>,
    pub faults: bool,
    pub default_variant: Variant,
    pub limits: Limits,
    /// `--idempotency-ttl-s`.
    pub idempotency_ttl: Duration,
    /// `--bench-url`: where the page's lessons send their load.
    pub bench_url: String,
}
