//! Connections of their own, to the master that serves a key's slot, for the commands that
//! cannot share the instance's multiplexed connection: `WAIT` blocks the connection it runs
//! on (confirmations), and `WATCH` is state of the connection that sent it (`optimistic`'s
//! transactions). One small deadpool per master, `host:port`; a checkout has the connection
//! to itself until it is dropped.
//!
//! The master of a slot is the one server (standalone), the one the sentinels name now
//! (sentinel), or read from `CLUSTER SLOTS` and kept until an error says it may have moved.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool::Runtime;
use deadpool::managed::{self, Metrics, Object, PoolError, RecycleResult, Timeouts};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, RedisError};

use super::{Master, RedisMode, Store, key_slot};

/// A connection checked out of a master's pool: the caller's alone until dropped.
pub type Checkout = Object<Manager>;

/// Connections to one master for its pool. A connection is checked by using it: one that
/// fails is taken out of the pool then, with [`drop_broken`] (deadpool-redis's manager
/// PINGs at every checkout, a round trip more for every use).
pub struct Manager {
    client: Client,
    config: AsyncConnectionConfig,
}

impl managed::Manager for Manager {
    type Type = MultiplexedConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<MultiplexedConnection, RedisError> {
        self.client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await
    }

    async fn recycle(
        &self,
        _: &mut MultiplexedConnection,
        _: &Metrics,
    ) -> RecycleResult<RedisError> {
        Ok(())
    }
}

/// One master's pool, and what its user keeps beside it (`S`).
pub struct MasterPool<S> {
    pool: managed::Pool<Manager>,
    pub state: S,
}

impl<S> MasterPool<S> {
    /// A connection of the pool, waiting up to `wait` for one to come free: `Ok(None)`
    /// when none did.
    pub async fn checkout(
        &self,
        wait: Duration,
        timeout: Duration,
    ) -> Result<Option<Checkout>, RedisError> {
        let timeouts = Timeouts {
            wait: Some(wait),
            create: Some(timeout),
            recycle: Some(timeout),
        };
        match self.pool.timeout_get(&timeouts).await {
            Ok(conn) => Ok(Some(conn)),
            Err(PoolError::Timeout(_)) => Ok(None),
            Err(PoolError::Backend(err)) => Err(err),
            Err(err) => Err(unavailable(&err.to_string())),
        }
    }
}

/// A connection that failed may be half-way through a reply, or to a master that is gone:
/// it leaves the pool instead of going back to it.
pub fn drop_broken(conn: Checkout) {
    let _ = Object::take(conn);
}

/// A pool per master of `store`, each of `pool_size` connections.
pub struct MasterPools<S> {
    store: Store,
    /// How the store's first URL connects (scheme, credentials, TLS): every master is
    /// connected to the same way.
    template: ConnectionInfo,
    pool_size: usize,
    masters: Mutex<HashMap<String, Arc<MasterPool<S>>>>,
    /// A Cluster's masters and their slots, as last read.
    slots: tokio::sync::Mutex<Vec<Master>>,
}

impl<S: Default> MasterPools<S> {
    pub fn new(store: &Store, pool_size: usize) -> anyhow::Result<Self> {
        let config = &store.config;
        let first = config.url_list().first().map(|u| (*u).to_owned());
        let client = super::client(&first.unwrap_or_default(), config.tls_ca.as_deref())?;
        Ok(Self {
            store: store.clone(),
            template: client.get_connection_info().clone(),
            pool_size: pool_size.max(1),
            masters: Mutex::new(HashMap::new()),
            slots: tokio::sync::Mutex::new(Vec::new()),
        })
    }

    /// `--redis-timeout-ms`: bounds every command and every connection attempt.
    pub fn timeout(&self) -> Duration {
        self.store.config.timeout
    }

    /// The pool of the master that serves `key`'s slot now.
    pub async fn master_of(&self, key: &str) -> Result<Arc<MasterPool<S>>, RedisError> {
        let addr = match self.store.mode() {
            RedisMode::Standalone => address(&self.template),
            RedisMode::Sentinel => self.store.conn().master_address().await?,
            RedisMode::Cluster => self.cluster_master(key).await?,
        };
        let mut masters = self.masters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(master) = masters.get(&addr) {
            return Ok(master.clone());
        }
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
            .ok_or_else(|| unavailable("a master address without a port"))?;
        // `--redis-timeout-ms` bounds every command here too (a `WAIT` timeout is below
        // it, checked at start-up), which the client's default of 500 ms may not.
        let timeout = Some(self.timeout());
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(timeout)
            .set_response_timeout(timeout);
        let info = with_address(self.template.clone(), host, port);
        let manager = Manager {
            client: Client::open(info)?,
            config,
        };
        let pool = managed::Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|err| unavailable(&err.to_string()))?;
        let master = Arc::new(MasterPool {
            pool,
            state: S::default(),
        });
        masters.insert(addr, master.clone());
        Ok(master)
    }

    /// Forgets a master that is gone: the next use finds the one that serves the slot then.
    pub fn forget(&self, master: &Arc<MasterPool<S>>) {
        let mut masters = self.masters.lock().unwrap_or_else(|e| e.into_inner());
        masters.retain(|_, m| !Arc::ptr_eq(m, master));
    }

    /// After an error: the master may have moved (a failover); read the slots again next
    /// time (the sentinels are asked at every use anyway).
    pub async fn forget_slots(&self) {
        self.slots.lock().await.clear();
    }

    /// The master of `key`'s slot on a Cluster, from the slots last read (read again when
    /// there are none, or none serves the slot).
    async fn cluster_master(&self, key: &str) -> Result<String, RedisError> {
        let slot = key_slot(key.as_bytes());
        let mut slots = self.slots.lock().await;
        if let Some(master) = slots.iter().find(|m| m.serves(slot)) {
            return Ok(master.addr.clone());
        }
        *slots = self.store.masters().await?;
        slots
            .iter()
            .find(|m| m.serves(slot))
            .map(|m| m.addr.clone())
            .ok_or_else(|| unavailable("no master serves the slot"))
    }
}

/// `host:port` of a connection's address.
fn address(info: &ConnectionInfo) -> String {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        ConnectionAddr::Unix(path) => path.display().to_string(),
        _ => String::new(),
    }
}

/// `info` with its address replaced by `host:port`, keeping TLS and credentials.
fn with_address(info: ConnectionInfo, host: String, port: u16) -> ConnectionInfo {
    let addr = match info.addr().clone() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            tls_params,
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    info.set_addr(addr)
}

pub(super) fn unavailable(what: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        what.to_owned(),
    ))
}
