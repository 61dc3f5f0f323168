//! Confirming writes with replicas (`WAIT`) without stalling anything else.
//!
//! `WAIT` blocks the connection it runs on until enough replicas acknowledge, and it only
//! covers that connection's own writes. Run on the instance's shared multiplexed connection,
//! one replica that stops answering makes every command behind it — health checks,
//! `/stats`, other products' sales — wait out the timeout, one `WAIT` after another.
//!
//! So writes stay on the shared connection, and a confirmation runs on a connection of its
//! own, taken from a small pool per master (deadpool, `--confirm-connections` each):
//! a marker write on the slot of the key written (`SET <tag>:confirm`), then `WAIT`.
//! Replication is one ordered stream per master, so replicas that have the marker have
//! everything the master applied before it — the sale or the lock that was just written.
//! With group commit, one confirmation covers a whole batch.
//!
//! A confirmation that cannot come fails fast: once a `WAIT` falls short, the master is
//! *suspect* and every confirmation on it answers "not confirmed" at once, while one probe
//! (a marker and a short `WAIT`) tries every [`PROBE_EVERY`] until replicas answer again.
//! An exhausted pool is said at once too, never queued.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool::Runtime;
use deadpool::managed::{self, Metrics, Object, PoolError, RecycleResult, Timeouts};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, RedisError};

use super::{Master, RedisConn, RedisMode, Store, key_slot};

/// How often a suspect master is probed.
pub const PROBE_EVERY: Duration = Duration::from_millis(200);

/// How long a marker lives: long past any confirmation; it only has to outlive its `WAIT`.
const MARKER_TTL_MS: u64 = 60_000;

/// What a confirmation came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmed {
    /// Enough replicas have everything written before it.
    Yes,
    /// Fewer replicas acknowledged in time, or the master is known to lack them now.
    No,
    /// Every confirmation connection of the master is in use: nothing was asked.
    Busy,
}

/// `--redis-wait-replicas` (sales) or `--lock-wait-replicas` (locks) on one store.
pub struct Confirmations {
    store: Store,
    /// How the store's first URL connects (scheme, credentials, TLS): every master is
    /// connected to the same way.
    template: ConnectionInfo,
    replicas: u32,
    timeout: Duration,
    pool_size: usize,
    /// What the marker says: the instance that wrote it.
    instance: Arc<str>,
    /// A pool and a suspect flag per master, by `host:port`.
    masters: Mutex<HashMap<String, Arc<MasterPool>>>,
    /// A Cluster's masters and their slots, as last read.
    slots: tokio::sync::Mutex<Vec<Master>>,
}

type Pool = managed::Pool<Manager>;

/// Connections to one master for the pool. A connection is checked by using it: one that
/// fails is taken out of the pool then (deadpool-redis's manager PINGs at every checkout,
/// a round trip more for every confirmation).
struct Manager {
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

struct MasterPool {
    pool: Pool,
    suspect: AtomicBool,
    probing: AtomicBool,
}

impl Confirmations {
    /// Confirmations on `store` by `replicas` replicas within `timeout`, with `pool_size`
    /// connections per master; `None` when no replica is asked for.
    pub fn new(
        store: &Store,
        replicas: u32,
        timeout: Duration,
        pool_size: usize,
        instance: Arc<str>,
    ) -> anyhow::Result<Option<Arc<Self>>> {
        if replicas == 0 {
            return Ok(None);
        }
        let config = &store.config;
        let first = config.url_list().first().map(|u| (*u).to_owned());
        let client = super::client(&first.unwrap_or_default(), config.tls_ca.as_deref())?;
        Ok(Some(Arc::new(Self {
            store: store.clone(),
            template: client.get_connection_info().clone(),
            replicas,
            timeout,
            pool_size: pool_size.max(1),
            instance,
            masters: Mutex::new(HashMap::new()),
            slots: tokio::sync::Mutex::new(Vec::new()),
        })))
    }

    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// Whether `replicas` replicas of the master that serves `marker`'s slot have everything
    /// written to it until now. `marker` is a key of the written key's hash tag.
    pub async fn confirm(self: &Arc<Self>, marker: &str) -> Result<Confirmed, RedisError> {
        let master = self.master_of(marker).await?;
        if master.suspect.load(Ordering::Acquire) {
            self.probe(master, marker);
            return Ok(Confirmed::No);
        }
        let no_wait = Timeouts {
            wait: Some(Duration::ZERO),
            create: Some(self.store.config.timeout),
            recycle: Some(self.store.config.timeout),
        };
        let mut conn = match master.pool.timeout_get(&no_wait).await {
            Ok(conn) => conn,
            Err(PoolError::Timeout(_)) => return Ok(Confirmed::Busy),
            Err(PoolError::Backend(err)) => {
                self.forget_slots().await;
                return Err(err);
            }
            Err(err) => return Err(unavailable(&err.to_string())),
        };
        let acked = match self.wait(&mut *conn, marker, self.timeout).await {
            Ok(acked) => acked,
            Err(err) => {
                // A connection that failed may be to a master that is gone.
                let _ = Object::take(conn);
                self.forget_slots().await;
                return Err(err);
            }
        };
        if acked >= self.replicas {
            return Ok(Confirmed::Yes);
        }
        tracing::warn!(
            key = %marker,
            acked,
            wanted = self.replicas,
            "not confirmed by enough replicas in time: confirmations on this master fail fast until a probe succeeds"
        );
        master.suspect.store(true, Ordering::Release);
        self.probe(master, marker);
        Ok(Confirmed::No)
    }

    /// A marker on `marker`'s slot, then `WAIT`, in one round trip on `conn`.
    async fn wait(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        marker: &str,
        timeout: Duration,
    ) -> Result<u32, RedisError> {
        let (acked,): (u32,) = redis::pipe()
            .cmd("SET")
            .arg(marker)
            .arg(&*self.instance)
            .arg("PX")
            .arg(MARKER_TTL_MS)
            .ignore()
            .cmd("WAIT")
            .arg(self.replicas)
            .arg(seckill_lock::millis(timeout).max(1))
            .query_async(conn)
            .await?;
        Ok(acked)
    }

    /// Tries, every [`PROBE_EVERY`], whether replicas confirm again; clears the master's
    /// suspicion when they do. One probe per master at a time.
    fn probe(self: &Arc<Self>, master: Arc<MasterPool>, marker: &str) {
        if master.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (this, marker) = (self.clone(), marker.to_owned());
        tokio::spawn(async move {
            // A short WAIT: a replica that answers at all answers in well under it.
            let short = this.timeout.min(Duration::from_millis(100));
            loop {
                tokio::time::sleep(PROBE_EVERY).await;
                let answered = match master.pool.get().await {
                    Ok(mut conn) => match this.wait(&mut *conn, &marker, short).await {
                        Ok(acked) => Some(acked),
                        Err(_) => {
                            let _ = Object::take(conn);
                            None
                        }
                    },
                    Err(_) => None,
                };
                match answered {
                    Some(acked) if acked >= this.replicas => {
                        master.suspect.store(false, Ordering::Release);
                        master.probing.store(false, Ordering::Release);
                        tracing::info!(key = %marker, "replicas confirm again");
                        return;
                    }
                    Some(_) => {}
                    None => {
                        // The master is gone (a failover, a crash): forget it; the next
                        // confirmation finds the master that serves the slot then.
                        this.forget(&master);
                        this.forget_slots().await;
                        master.probing.store(false, Ordering::Release);
                        return;
                    }
                }
            }
        });
    }

    fn forget(&self, master: &Arc<MasterPool>) {
        let mut masters = self.masters.lock().unwrap_or_else(|e| e.into_inner());
        masters.retain(|_, m| !Arc::ptr_eq(m, master));
    }

    /// The pool of the master that serves `key`'s slot now.
    async fn master_of(&self, key: &str) -> Result<Arc<MasterPool>, RedisError> {
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
        // `--redis-timeout-ms` bounds every command here too; it is above the WAIT timeout
        // (checked at start-up), which the client's default of 500 ms may not be.
        let timeout = Some(self.store.config.timeout);
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
            suspect: AtomicBool::new(false),
            probing: AtomicBool::new(false),
        });
        masters.insert(addr, master.clone());
        Ok(master)
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

    /// After an error: the master may have moved (a failover); read the slots again next
    /// time, and let the sentinels be asked again.
    async fn forget_slots(&self) {
        self.slots.lock().await.clear();
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

fn unavailable(what: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        what.to_owned(),
    ))
}

impl RedisConn {
    /// `host:port` of the master in use, for a connection to one master (standalone:
    /// `None`; a Cluster has many).
    pub async fn master_address(&self) -> Result<String, RedisError> {
        match self {
            Self::Sentinel(conn) => conn.master_address().await,
            _ => Err(unavailable("only a sentinel connection names one master")),
        }
    }
}
