//! How an instance's watchdog locks are started: the options, then the subscription.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::subscription::{Subscriber, subscribe};
use super::waiters::{DEFAULT_HANDOFFS, Shared, WatchdogLocks};
use super::{DEFAULT_LEASE, WatchdogLock};
use crate::keys::Namespace;
use crate::{Connection, HolderId, HolderIds};

/// The options of an instance's watchdog locks, set before they start
/// ([`WatchdogLocks::builder`]).
#[must_use = "nothing starts until `start` is called"]
pub struct WatchdogLocksBuilder<S, C> {
    subscriber: S,
    conn: C,
    lease: Duration,
    namespace: Namespace,
    handoffs: u32,
    instance: Option<String>,
}

impl<C: Connection> WatchdogLocks<C> {
    /// The locks of this instance, taken and given back on `conn`, their waiters woken by
    /// one subscription to every release channel, on what `subscriber` names: a
    /// [`redis::Client`] for one server, the nodes of a Cluster (`Vec<redis::Client>`: every
    /// node hears every `PUBLISH`, and the subscription moves to the next when one goes
    /// away), or a
    /// `sentinel::SentinelConnection` (feature `sentinel`),
    /// which follows the master the sentinels name.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use seckill_lock::{Namespace, WatchdogLocks};
    /// # async fn run() -> Result<(), redis::RedisError> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let conn = client.get_multiplexed_async_connection().await?;
    /// let locks = WatchdogLocks::builder(client, conn)
    ///     .namespace(Namespace::new("myapp"))
    ///     .lease(Duration::from_secs(30))
    ///     .start();
    /// # Ok(()) }
    /// ```
    pub fn builder<S: Subscriber>(subscriber: S, conn: C) -> WatchdogLocksBuilder<S, C> {
        WatchdogLocksBuilder {
            subscriber,
            conn,
            lease: DEFAULT_LEASE,
            namespace: Namespace::new("lock"),
            handoffs: DEFAULT_HANDOFFS,
            instance: None,
        }
    }

    /// A handle on the lock named `name` in this instance's namespace, for a holder of its
    /// own: a fresh [`HolderId`]. Re-enter the lock through this handle
    /// ([`Lock::take`](crate::Lock::take) again), not through a second one: two handles
    /// are two holders.
    ///
    /// # Panics
    ///
    /// On a namespace that [requires hash tags](Namespace::requiring_hash_tags) (redis-rs's
    /// Cluster connection asks for it), when the lock's keys have none.
    pub fn lock(&self, name: &str) -> WatchdogLock<C> {
        WatchdogLock::new(self.shared.clone(), name, &self.shared.holders.next())
    }

    /// A handle on the lock named `name` for `holder`, for a caller that records who held
    /// what (the id a request carries into every lock it takes). Two handles on one lock
    /// with one holder are one holder in Redis — the release of the one frees the lock
    /// under the other — so give each handle on a lock an id of its own.
    ///
    /// # Panics
    ///
    /// As [`lock`](Self::lock).
    pub fn lock_as(&self, name: &str, holder: &HolderId) -> WatchdogLock<C> {
        WatchdogLock::new(self.shared.clone(), name, holder)
    }
}

impl<S: Subscriber, C: Connection> WatchdogLocksBuilder<S, C> {
    /// The lease of every lock taken without one of its own, renewed by a watchdog every
    /// third of it while held (default: [`DEFAULT_LEASE`](super::DEFAULT_LEASE), 30 s).
    /// At least 3 ms.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(3));
        self
    }

    /// Where the locks live (default: `Namespace::new("lock")`).
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.namespace = namespace;
        self
    }

    /// How many times in a row a holder may hand a lock to a waiter of this instance
    /// before it releases it for every instance (default: [`DEFAULT_HANDOFFS`]); 0 turns
    /// hand-offs off.
    pub fn handoffs(mut self, in_a_row: u32) -> Self {
        self.handoffs = in_a_row;
        self
    }

    /// The instance's name, put in front of the holder ids [`WatchdogLocks::lock`] makes
    /// (`"<instance>/<uuid>:<n>"`), so that whoever looks at a lock sees which instance
    /// holds it.
    pub fn instance(mut self, name: &str) -> Self {
        self.instance = Some(name.to_owned());
        self
    }

    /// Starts the instance's subscription and returns its locks. Call it once per process,
    /// inside a Tokio runtime (it spawns the subscription), and clone what it returns; the
    /// subscription stops, with its connection, when the last clone and the last lock
    /// handle are dropped.
    pub fn start(self) -> WatchdogLocks<C> {
        // On redis-rs's Cluster connection a lock without a hash tag is refused at
        // `lock()`, not by Redis at its first take (`CROSSSLOT`).
        #[cfg(feature = "cluster")]
        let namespace = if std::any::TypeId::of::<C>()
            == std::any::TypeId::of::<redis::cluster_async::ClusterConnection>()
        {
            self.namespace.requiring_hash_tags()
        } else {
            self.namespace
        };
        #[cfg(not(feature = "cluster"))]
        let namespace = self.namespace;
        let pattern = namespace.channel_pattern();
        let (stops, stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = Arc::new(Shared {
            conn: self.conn,
            lease: self.lease,
            namespace,
            counters: Arc::default(),
            holders: self
                .instance
                .as_deref()
                .map_or_else(HolderIds::new, HolderIds::for_instance),
            handoffs: self.handoffs,
            queues: Mutex::new(HashMap::new()),
            _stops_subscription: stops,
        });
        let subscription = subscribe(self.subscriber, pattern, Arc::downgrade(&shared));
        tokio::spawn(async move {
            // Stopped, with its connection, once the instance's last handle is dropped.
            tokio::select! {
                () = subscription => {}
                _ = stopped => {}
            }
        });
        WatchdogLocks { shared }
    }
}
