//! The state every handler shares.

use std::sync::Arc;

use crate::config::{Limits, ServeArgs};
use crate::lessons::Lessons;
use crate::lock::{OwnerIds, Redlock, WatchdogLocks};
use crate::metrics::Metrics;
use crate::store::Store;
use crate::variant::Variant;
use crate::variants::{LuaBatches, ReplicaWait, Shares};

#[derive(Clone)]
pub struct AppState {
    /// The stock store: stock, orders, audit (and the locks, unless a lock store is
    /// named). Its connection is multiplexed and shared by every request: commands from
    /// many tasks are pipelined onto it, so Redis access never waits for a free
    /// connection. It reconnects by itself when Redis comes back (and follows a Cluster's
    /// or the sentinels' failovers).
    pub store: Store,
    /// The lock store: setnx, token, watchdog and segmented locks. The stock store
    /// itself unless `--lock-redis-url` names another.
    pub lock_store: Store,
    /// Whether `--lock-redis-url` named a lock store of its own.
    pub separate_lock_store: bool,
    /// The `redlock` variant's servers (`--redlock-urls`).
    pub redlock: Option<Redlock>,
    pub settings: Arc<Settings>,
    pub metrics: Arc<Metrics>,
    pub owners: Arc<OwnerIds>,
    /// The watchdog locks' shared subscription and waiter queues.
    pub locks: WatchdogLocks,
    /// The lua variant's shared calls to Redis.
    pub lua: LuaBatches,
    /// The shares this instance holds (the `shares` variant).
    pub shares: Shares,
    /// The lessons the page starts.
    pub lessons: Lessons,
}

/// The parts of the configuration handlers read.
#[derive(Debug)]
pub struct Settings {
    pub instance: Arc<str>,
    pub admin_token: Option<String>,
    pub faults: bool,
    pub default_variant: Variant,
    pub limits: Limits,
    /// `--redis-wait-replicas`, when above 0.
    pub wait: Option<ReplicaWait>,
    /// `--lock-wait-replicas`, when above 0.
    pub lock_wait: Option<ReplicaWait>,
}

impl Settings {
    pub fn new(args: &ServeArgs, instance: String) -> Self {
        Self {
            instance: instance.into(),
            admin_token: args.admin_token.clone(),
            faults: args.faults,
            default_variant: args.default_variant,
            limits: args.limits.clone(),
            wait: (args.redis_wait_replicas > 0).then(|| ReplicaWait {
                replicas: args.redis_wait_replicas,
                timeout: std::time::Duration::from_millis(args.redis_wait_timeout_ms),
            }),
            lock_wait: (args.lock_wait_replicas > 0).then(|| ReplicaWait {
                replicas: args.lock_wait_replicas,
                timeout: std::time::Duration::from_millis(args.redis_wait_timeout_ms),
            }),
        }
    }
}
