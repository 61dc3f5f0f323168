//! Which Redis, in which topology: the one module that knows.
//!
//! As Redisson picks `useSingleServer` or `useClusterServers` once and everything above
//! talks to one executor, an instance picks its topology here, once, and the variants,
//! locks and audit talk to a [`RedisConn`] without knowing whether a Cluster is behind it.
//!
//! - `standalone`: one server, one multiplexed connection ([`ConnectionManager`]) that
//!   reconnects by itself.
//! - `cluster`: redis-rs's async cluster client, from a list of initial nodes; it follows
//!   slot moves and failovers by itself. Every script keeps its keys in one hash tag, so
//!   each call lands on one slot; what spans shards goes as one call per shard. A command
//!   is sent again only when it cannot have run ([`ClusterConn`]): a lost answer stays an
//!   unknown outcome, whatever a later try would have met.
//! - `sentinel`: a master found through Redis Sentinel ([`SentinelConnection`]); on a connection
//!   error or a `READONLY` answer the connection is dropped and the sentinels are asked
//!   again, so an instance follows a failover by itself.
//!
//! An instance has two stores: the stock store (stock, orders, audit) and the lock store
//! (setnx, token, watchdog and segmented locks), which is the stock store unless
//! `--lock-redis-url` names another, as real deployments keep locks and data apart.

mod cluster;
mod confirm;
mod pools;
mod topology;

pub use cluster::{ClusterConn, never_ran};
pub use confirm::{Confirmations, Confirmed};
pub use pools::{Checkout, MasterPool, MasterPools, drop_broken};
pub use seckill_lock::sentinel::SentinelConnection;
pub use topology::{Master, key_slot, master_of};

use topology::{node_address, parse_cluster_slots};

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

/// How the stock store is deployed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisMode {
    /// One Redis server (`--redis-url` is one URL).
    Standalone,
    /// Redis Cluster (`--redis-url` lists initial nodes, comma-separated).
    Cluster,
    /// A master and its replicas watched by Redis Sentinel (`--redis-url` lists the
    /// sentinels, and the master's name is given apart).
    Sentinel,
}

/// What it takes to connect: the topology, its URLs, and the CA for `rediss://`.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub mode: RedisMode,
    /// One URL, or (cluster) a comma-separated list of initial nodes.
    pub urls: String,
    /// PEM of the CA that signed the servers' TLS certificates.
    pub tls_ca: Option<Vec<u8>>,
    /// Bound on every command and every connection attempt.
    pub timeout: Duration,
    /// The name the sentinels know the master by (sentinel mode).
    pub sentinel_master: Option<String>,
}

impl StoreConfig {
    /// The URLs, trimmed, empty ones dropped.
    pub fn url_list(&self) -> Vec<&str> {
        self.urls
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect()
    }
}

/// A connection to the store, whatever its topology. Cheap to clone: clones share one
/// multiplexed connection (per node, on a Cluster).
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConn),
    Sentinel(SentinelConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
            Self::Sentinel(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Sentinel(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
            Self::Sentinel(conn) => conn.get_db(),
        }
    }
}

impl RedisConn {
    /// After a reply that says the node is no longer the master (a script line's
    /// `READONLY`, answered as a value, so no error the connection saw): behind sentinels,
    /// the next command asks them again. One Redis has no other node to go to, and a
    /// Cluster follows its slots' owners by itself.
    pub async fn forget_master(&self) {
        if let Self::Sentinel(conn) = self {
            conn.forget_master().await;
        }
    }

    /// The masters and the slots each serves, ordered by their first slot. A standalone
    /// server is the one master of every slot.
    pub async fn masters(&mut self, config: &StoreConfig) -> Result<Vec<Master>, RedisError> {
        match self {
            Self::Single(_) => Ok(vec![Master {
                addr: config
                    .url_list()
                    .first()
                    .map(|url| node_address(url))
                    .unwrap_or_default(),
                slots: vec![(0, 16383)],
            }]),
            Self::Cluster(conn) => {
                let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
                Ok(parse_cluster_slots(slots))
            }
            Self::Sentinel(conn) => Ok(vec![Master {
                addr: conn.master_address().await?,
                slots: vec![(0, 16383)],
            }]),
        }
    }
}

/// A store of an instance: its connection, and what the few things that must talk to one
/// node at a time (the release subscription) need to find one.
#[derive(Clone)]
pub struct Store {
    pub config: StoreConfig,
    conn: RedisConn,
    nodes: Nodes,
}

/// Where a subscriber can listen for every lock's release messages.
#[derive(Clone)]
pub enum Nodes {
    /// The one server, or (Cluster) each URL given, tried in turn: any node of a Cluster
    /// hears every `PUBLISH`, so the subscriber moves to the next when one goes away.
    Fixed(Vec<redis::Client>),
    /// The master the sentinels name at the time.
    Sentinel(SentinelConnection),
}

/// The watchdog locks' subscription listens on these.
impl seckill_lock::watchdog::Subscriber for Nodes {
    /// The node to try on the `attempt`-th (re)connection.
    async fn client(&self, attempt: usize) -> Option<redis::Client> {
        match self {
            Self::Fixed(clients) => clients.client(attempt).await,
            Self::Sentinel(conn) => conn.client(attempt).await,
        }
    }
}

impl Store {
    /// Connects lazily: nothing is asked of Redis until the first command, so an instance
    /// starts (and answers 503) while Redis is away.
    pub fn connect(config: StoreConfig) -> anyhow::Result<Self> {
        let urls = config.url_list();
        ensure!(!urls.is_empty(), "--redis-url names no server");
        if config.mode == RedisMode::Sentinel {
            let master = config
                .sentinel_master
                .as_deref()
                .context("sentinel mode needs the master's name (--redis-sentinel-master)")?;
            let conn = SentinelConnection::new(&urls, master, config.timeout)
                .context("--redis-url (sentinels)")?;
            return Ok(Self {
                config,
                conn: RedisConn::Sentinel(conn.clone()),
                nodes: Nodes::Sentinel(conn),
            });
        }
        let clients = urls
            .iter()
            .map(|url| client(url, config.tls_ca.as_deref()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let nodes = Nodes::Fixed(clients.clone());
        let conn = match config.mode {
            RedisMode::Standalone => {
                if urls.len() > 1 {
                    bail!(
                        "--redis-url lists {} servers; use --redis-mode cluster for a list",
                        urls.len()
                    );
                }
                RedisConn::Single(
                    ConnectionManager::new_lazy_with_config(
                        clients[0].clone(),
                        manager_config(config.timeout),
                    )
                    .context("creating the redis connection")?,
                )
            }
            RedisMode::Cluster => {
                let mut builder = ClusterClient::builder(urls.iter().copied())
                    .connection_timeout(config.timeout)
                    .response_timeout(config.timeout)
                    // No retries of the client's own: it would send a command again after
                    // its answer was lost, and report the last try's error. ClusterConn
                    // sends again only what cannot have run.
                    .retries(0);
                if let Some(ca) = &config.tls_ca {
                    builder = builder.certs(redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(ca.clone()),
                    });
                }
                let client = builder
                    .build()
                    .context("--redis-url (cluster initial nodes)")?;
                let cluster_config = ClusterConfig::new()
                    .set_connection_timeout(config.timeout)
                    .set_response_timeout(config.timeout);
                RedisConn::Cluster(ClusterConn::new(client, cluster_config, config.timeout))
            }
            RedisMode::Sentinel => unreachable!("handled above"),
        };
        Ok(Self {
            config,
            conn,
            nodes,
        })
    }

    pub fn conn(&self) -> RedisConn {
        self.conn.clone()
    }

    /// Where a subscriber can listen for every lock's release messages: the one server,
    /// any node of the Cluster (a plain `PUBLISH` reaches them all), or the master the
    /// sentinels name.
    pub fn subscribe_targets(&self) -> Nodes {
        self.nodes.clone()
    }

    pub fn mode(&self) -> RedisMode {
        self.config.mode
    }

    pub async fn masters(&self) -> Result<Vec<Master>, RedisError> {
        self.conn.clone().masters(&self.config).await
    }

    /// How many masters answer a `PING`, of how many there are: one Redis, or the master
    /// the sentinels name, is one of one; a Cluster's masters are asked each, all at once,
    /// as `CLUSTER SLOTS` names them — asked of every node the client knows at once, the
    /// first answer taken (not of one at random: a node that is gone must not make the
    /// Cluster look gone). An error when none answers.
    pub async fn answering(&self) -> Result<Answering, RedisError> {
        let mut conn = self.conn.clone();
        let RedisConn::Cluster(cluster) = &conn else {
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
            return Ok(Answering {
                answering: 1,
                of: 1,
                away: Vec::new(),
            });
        };
        let cluster = cluster.clone();
        let slots = cluster
            .clone()
            .ask_any_node(redis::cmd("CLUSTER").arg("SLOTS").to_owned())
            .await;
        let masters = parse_cluster_slots(slots?);
        let pings = masters.iter().map(|master| {
            let mut cluster = cluster.clone();
            async move {
                let asked = cluster.ask_node(&master.addr, redis::cmd("PING")).await;
                match asked {
                    // A master the client has no connection to yet (one promoted since it
                    // last read the slots): asked on a connection of its own.
                    Err(err) if err.kind() == ErrorKind::ClusterConnectionNotFound => {
                        self.ping_directly(&master.addr).await
                    }
                    asked => asked,
                }
            }
        });
        let answers = futures_util::future::join_all(pings).await;
        let answering = answers.iter().filter(|answer| answer.is_ok()).count();
        let of = masters.len();
        let away = masters
            .into_iter()
            .zip(&answers)
            .filter(|(_, answer)| answer.is_err())
            .map(|(master, _)| master)
            .collect();
        match answers.into_iter().find_map(Result::err) {
            Some(err) if answering == 0 => Err(err),
            None if of == 0 => Err(RedisError::from((
                ErrorKind::ClusterConnectionNotFound,
                "the Cluster names no master",
            ))),
            _ => Ok(Answering {
                answering,
                of,
                away,
            }),
        }
    }
}

impl Store {
    /// `PING` to the node at `addr` on a connection of its own, made with the credentials
    /// and TLS of the first URL given, bounded by the store's timeout.
    async fn ping_directly(&self, addr: &str) -> Result<Value, RedisError> {
        let first = self.config.url_list().first().copied().unwrap_or_default();
        let url = with_address(first, addr);
        let client = client(&url, self.config.tls_ca.as_deref()).map_err(|err| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "a node's URL",
                err.to_string(),
            ))
        })?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.timeout))
            .set_response_timeout(Some(self.config.timeout));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("PING").query_async(&mut conn).await
    }
}

/// `url` (`redis://[user:password@]host:port[/db]`, or `rediss://`) with its `host:port`
/// replaced by `addr`.
fn with_address(url: &str, addr: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return format!("redis://{addr}");
    };
    let (auth, hostpath) = match rest.rsplit_once('@') {
        Some((auth, hostpath)) => (format!("{auth}@"), hostpath),
        None => (String::new(), rest),
    };
    let path = hostpath.find('/').map_or("", |i| &hostpath[i..]);
    format!("{scheme}://{auth}{addr}{path}")
}

/// What [`Store::answering`] found: `answering` masters of `of`, and those that did not
/// answer (`away`), each with the slots it serves: what cannot sell now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Answering {
    pub answering: usize,
    pub of: usize,
    pub away: Vec<Master>,
}

/// A client for one URL, trusting `ca` for TLS when given.
pub fn client(url: &str, ca: Option<&[u8]>) -> anyhow::Result<redis::Client> {
    let Some(ca) = ca else {
        return redis::Client::open(url).with_context(|| format!("redis URL {url:?}"));
    };
    let certificates = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    };
    redis::Client::build_with_tls(url, certificates)
        .with_context(|| format!("redis URL {url:?} with the TLS CA"))
}

/// Fail fast while Redis is away: every command and every connection attempt is bounded by
/// `timeout`, and reconnection is retried in the background rather than by waiting callers.
fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500))
}

#[cfg(test)]
mod tests {
    use super::with_address;

    /// A node's URL keeps the given URL's scheme, credentials and database.
    #[test]
    fn a_nodes_url_keeps_the_credentials_and_tls_of_the_first() {
        let node = "10.0.0.7:7001";
        assert_eq!(
            with_address("redis://127.0.0.1:7000", node),
            "redis://10.0.0.7:7001"
        );
        assert_eq!(
            with_address("rediss://:pw@redis-0.svc:6379/0", node),
            "rediss://:pw@10.0.0.7:7001/0"
        );
        assert_eq!(with_address("oops", node), "redis://10.0.0.7:7001");
    }
}
