//! The state every handler shares.

use std::sync::Arc;

use redis::aio::ConnectionManager;

use crate::config::{Limits, ServeArgs};
use crate::lock::{OwnerIds, WatchdogLocks};
use crate::metrics::Metrics;
use crate::variants::{LuaBatches, Variant};

#[derive(Clone)]
pub struct AppState {
    /// One multiplexed connection shared by every request: commands from many tasks are
    /// pipelined onto it, so Redis access never waits for a free connection. Reconnects
    /// by itself when Redis comes back.
    pub redis: ConnectionManager,
    /// Exclusive connections, for what cannot share one (`WATCH` in an admin reset).
    pub pool: deadpool_redis::Pool,
    pub settings: Arc<Settings>,
    pub metrics: Arc<Metrics>,
    pub owners: Arc<OwnerIds>,
    /// The watchdog locks' shared subscription and waiter queues.
    pub locks: WatchdogLocks,
    /// The lua variant's shared calls to Redis.
    pub lua: LuaBatches,
}

/// The parts of the configuration handlers read.
#[derive(Debug)]
pub struct Settings {
    pub instance: Arc<str>,
    pub admin_token: Option<String>,
    pub faults: bool,
    pub default_variant: Variant,
    pub limits: Limits,
}

impl Settings {
    pub fn new(args: &ServeArgs, instance: String) -> Self {
        Self {
            instance: instance.into(),
            admin_token: args.admin_token.clone(),
            faults: args.faults,
            default_variant: args.default_variant,
            limits: args.limits.clone(),
        }
    }
}
