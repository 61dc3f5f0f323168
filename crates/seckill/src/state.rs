//! The state every handler and every deduction shares: one instance.

use std::any::Any;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use seckill_lock::{HolderIds, Redlock, WatchdogLocks, ZooKeeper};

use crate::config::{Limits, ServeArgs};
use crate::lessons::Lessons;
use crate::metrics::Metrics;
use crate::orders::OrdersDb;
use crate::store::{Confirmations, RedisConn, Store};
use crate::variants::{Variant, VariantState};

/// One instance. Cheap to clone: one `Arc`.
#[derive(Clone)]
pub struct AppState(Arc<App>);

impl AppState {
    pub fn new(app: App) -> Self {
        Self(Arc::new(app))
    }
}

impl Deref for AppState {
    type Target = App;

    fn deref(&self) -> &App {
        &self.0
    }
}

pub struct App {
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
    /// `--orders-db`: the orders' store of record, when there is one.
    pub orders: Option<Arc<OrdersDb>>,
    /// What each variant keeps per instance (its `Spec::start`).
    pub variant_state: Vec<(Variant, VariantState)>,
    /// The lessons the page starts.
    pub lessons: Lessons,
}

impl App {
    /// What `variant` keeps per instance, if anything.
    pub fn variant_state(&self, variant: Variant) -> Option<&(dyn Any + Send + Sync)> {
        self.variant_state
            .iter()
            .find(|(v, _)| *v == variant)
            .map(|(_, state)| state.as_ref())
    }
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
}

impl Settings {
    pub fn new(args: &ServeArgs, instance: String) -> Self {
        Self {
            instance: instance.into(),
            admin_token: args.admin_token.clone(),
            faults: args.faults,
            default_variant: args.default_variant,
            limits: args.limits.clone(),
            idempotency_ttl: Duration::from_secs(args.idempotency_ttl_s),
        }
    }
}
