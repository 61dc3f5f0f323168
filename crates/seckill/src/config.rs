//! What one instance is told at start: the command line, every flag with an environment
//! variable, and the bounds on every knob.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use clap::{Args, Parser, Subcommand};
use seckill_lock::watchdog::DEFAULT_HANDOFFS;

pub use crate::knobs::Limits;
use crate::store::{RedisMode, StoreConfig};
use crate::variants::{self, Variant};

/// A flash-sale stock service that makes distributed locking on Redis visible.
#[derive(Debug, Parser)]
#[command(name = "seckill", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one instance of the service.
    Serve(ServeArgs),
}

/// The stock store: which Redis holds the stock, orders and audit, and in which topology.
/// `seckill serve` and `seckill-bench` take the same flags.
#[derive(Debug, Clone, Args)]
pub struct RedisArgs {
    /// Redis to share with the other instances: `redis://[[user]:password@]host:port[/db]`,
    /// or `rediss://…` for TLS. In cluster mode, a comma-separated list of initial nodes;
    /// in sentinel mode, of sentinels.
    #[arg(
        long,
        env = "SECKILL_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,

    /// How the stock store is deployed: one server, a Redis Cluster, or a master watched
    /// by Redis Sentinel (then --redis-url lists the sentinels).
    #[arg(long, env = "SECKILL_REDIS_MODE", value_enum, default_value_t = RedisMode::Standalone)]
    pub redis_mode: RedisMode,

    /// The name the sentinels know the stock store's master by (sentinel mode).
    #[arg(long, env = "SECKILL_REDIS_SENTINEL_MASTER")]
    pub redis_sentinel_master: Option<String>,

    /// PEM file of the CA that signed Redis' TLS certificate, for a `rediss://` URL whose
    /// server is not signed by a public CA.
    #[arg(long, env = "SECKILL_REDIS_TLS_CA")]
    pub redis_tls_ca: Option<PathBuf>,
}

impl RedisArgs {
    /// What it takes to connect, every command bounded by `timeout`.
    pub fn store_config(&self, timeout: Duration) -> anyhow::Result<StoreConfig> {
        Ok(StoreConfig {
            mode: self.redis_mode,
            urls: self.redis_url.clone(),
            tls_ca: self.tls_ca()?,
            timeout,
            sentinel_master: self.redis_sentinel_master.clone(),
        })
    }

    /// The CA's PEM, when one is given.
    pub fn tls_ca(&self) -> anyhow::Result<Option<Vec<u8>>> {
        self.redis_tls_ca
            .as_ref()
            .map(|ca| std::fs::read(ca).with_context(|| format!("reading {}", ca.display())))
            .transpose()
    }
}

/// Flags of `seckill serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, env = "SECKILL_LISTEN", default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub redis: RedisArgs,

    /// The lock store, for setnx, token, watchdog and segmented locks, as --redis-url is
    /// for the stock [default: the stock store itself].
    #[arg(long, env = "SECKILL_LOCK_REDIS_URL")]
    pub lock_redis_url: Option<String>,

    /// How the lock store is deployed [default: standalone, or the stock store's mode when
    /// the lock store is the stock store].
    #[arg(long, env = "SECKILL_LOCK_REDIS_MODE", value_enum)]
    pub lock_redis_mode: Option<RedisMode>,

    /// The name the sentinels know the lock store's master by (sentinel mode).
    #[arg(long, env = "SECKILL_LOCK_REDIS_SENTINEL_MASTER")]
    pub lock_redis_sentinel_master: Option<String>,

    /// Replicas of the lock store that must have a lock (`WAIT`) before its holder goes
    /// on, as Redisson's `checkLockSyncedSlaves`; a lock no replica confirmed in
    /// --redis-wait-timeout-ms is given back and the request answered 503
    /// `lock_unconfirmed`. 0: no WAIT.
    #[arg(long, env = "SECKILL_LOCK_WAIT_REPLICAS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=16))]
    pub lock_wait_replicas: u32,

    /// How many times in a row a watchdog holder may hand its lock straight to a waiter
    /// of this instance (one script, no message, no try) before it releases the lock for
    /// every instance, so that waiters elsewhere get their chance. 0: never hand over.
    #[arg(long, env = "SECKILL_LOCK_HANDOFFS", alias = "lock-hand-offs",
          default_value_t = DEFAULT_HANDOFFS,
          value_parser = clap::value_parser!(u32).range(0..=1_000))]
    pub lock_handoffs: u32,

    /// How long an instance's share (`shares`) outlives its last sale: when an instance
    /// dies, its unsold units go back to the pool this long after its last sale, for the
    /// next share taken.
    #[arg(long, env = "SECKILL_SHARE_LEASE_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub share_lease_ms: u64,

    /// The independent Redis masters of the `redlock` variant: 3 or 5 standalone URLs,
    /// comma-separated. Without them, `redlock` answers 503.
    #[arg(long, env = "SECKILL_REDLOCK_URLS", value_delimiter = ',')]
    pub redlock_urls: Vec<String>,

    /// The ZooKeeper ensemble of the `zookeeper` variant: `host:port` of each server,
    /// comma-separated (1 to 9). Without it, `zookeeper` answers 503.
    #[arg(long, env = "SECKILL_ZOOKEEPER_URLS", value_delimiter = ',')]
    pub zookeeper_urls: Vec<String>,

    /// The session timeout the instance asks the ensemble for (the servers bound it by
    /// their minSessionTimeout and maxSessionTimeout): how long a paused or cut-off
    /// instance keeps its `zookeeper` locks before the ensemble hands them on.
    #[arg(long, env = "SECKILL_ZOOKEEPER_SESSION_MS", default_value_t = 4_000,
          value_parser = clap::value_parser!(u64).range(1_000..=60_000))]
    pub zookeeper_session_ms: u64,

    /// Replicas that must have a sale (`WAIT` on the shard's master) before it is answered
    /// 200; when fewer confirm in time, the answer is 503 `unconfirmed`. 0: no WAIT.
    #[arg(long, env = "SECKILL_REDIS_WAIT_REPLICAS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=16))]
    pub redis_wait_replicas: u32,

    /// Connections kept per master for confirming writes with replicas: a marker write and
    /// `WAIT` run alone on one, so that a slow replica never holds up another command. When
    /// every one is in use, a sale is answered 503 `unconfirmed` at once, never queued.
    #[arg(long, env = "SECKILL_CONFIRM_CONNECTIONS", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub confirm_connections: u32,

    /// Connections kept per master for `optimistic`'s transactions: `WATCH` is state of
    /// the connection that sent it, so each transaction has one to itself from `WATCH` to
    /// `EXEC`. When every one stays in use for --redis-timeout-ms, the request is answered
    /// 503 `tx_busy`.
    #[arg(long, env = "SECKILL_TX_CONNECTIONS", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub tx_connections: u32,

    /// How long that `WAIT` may take. Below --redis-timeout-ms, which bounds the command.
    #[arg(long, env = "SECKILL_REDIS_WAIT_TIMEOUT_MS", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub redis_wait_timeout_ms: u64,

    /// The orders' store of record, `postgres://user@host:port/db`: every sale's order is
    /// streamed from Redis into it (and `/stats` reconciles the two). Without it, orders
    /// live in Redis only.
    #[arg(long, env = "SECKILL_ORDERS_DB", hide_env_values = true)]
    pub orders_db: Option<String>,

    /// Connections to --orders-db kept per instance for the `pg_*` variants' locks and
    /// stock (apart from the orders' consumer's). A `pg_advisory` or `pg_for_update` holder
    /// keeps one for as long as it holds the lock, so this bounds the holders and waiters
    /// an instance has inside PostgreSQL; past it a request waits up to
    /// --redis-timeout-ms × 5 for one, then is answered 503 `database_unavailable`.
    #[arg(long, env = "SECKILL_PG_CONNECTIONS", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::database::MAX_CONNECTIONS)))]
    pub pg_connections: u32,

    /// A stream entry pending this long with one instance's consumer (it died, or lost
    /// the database) is claimed by another's.
    #[arg(long, env = "SECKILL_ORDERS_CLAIM_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub orders_claim_ms: u64,

    /// Orders per read from a stream and per database transaction.
    #[arg(long, env = "SECKILL_ORDERS_BATCH", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub orders_batch: u64,

    /// How often this instance expires reservations unpaid in time, ms (a sale with a
    /// payment window, `pay_within_ms` at reset). Every instance sweeps; a payment after
    /// the deadline is refused whenever the sweep runs.
    #[arg(long, env = "SECKILL_EXPIRY_SWEEP_MS", default_value_t = 200,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub expiry_sweep_ms: u64,

    /// How long an `Idempotency-Key` is remembered, seconds: a repeat within it gets the
    /// first answer again (default one day; at most thirty).
    #[arg(long, env = "SECKILL_IDEMPOTENCY_TTL_S", default_value_t = 86_400,
          value_parser = clap::value_parser!(u64).range(1..=2_592_000))]
    pub idempotency_ttl_s: u64,

    /// Name of this instance in orders, `/stats` and responses, `[A-Za-z0-9_.:-]{1,64}`
    /// [default: the bound listen address].
    #[arg(long, env = "SECKILL_INSTANCE_ID")]
    pub instance_id: Option<String>,

    /// Bearer token for `/admin`. Without one, `/admin` answers loopback peers only.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Enable fault injection (`fault=abandon`, `fault=pause_before_release`). When off, a
    /// request that asks for a fault is refused with 400.
    #[arg(long, env = "SECKILL_FAULTS")]
    pub faults: bool,

    /// Where the page's lessons send their load: the Nginx in front of the instances (or
    /// one instance), as `seckill-bench --url`.
    #[arg(
        long,
        env = "SECKILL_BENCH_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub bench_url: String,

    /// Variant served at `/deduct_stock` when the path names none.
    #[arg(long, env = "SECKILL_DEFAULT_VARIANT", value_enum, default_value_t = variants::lua())]
    pub default_variant: Variant,

    #[command(flatten)]
    pub limits: Limits,
}

impl ServeArgs {
    /// The parts of the configuration handlers and deductions read, for instance
    /// `instance`.
    pub fn settings(&self, instance: String) -> crate::variants::Settings {
        crate::variants::Settings {
            instance: instance.into(),
            admin_token: self.admin_token.clone(),
            faults: self.faults,
            default_variant: self.default_variant,
            limits: self.limits.clone(),
            idempotency_ttl: Duration::from_secs(self.idempotency_ttl_s),
            bench_url: self.bench_url.clone(),
        }
    }
}

/// An instance id goes into Redis hash fields and responses, so it is kept plain.
pub fn check_instance_id(id: &str) -> anyhow::Result<()> {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
    if id.is_empty() || id.len() > 64 || !id.chars().all(valid) {
        bail!("--instance-id must match [A-Za-z0-9_.:-]{{1,64}}, got {id:?}");
    }
    Ok(())
}

/// A ZooKeeper server is `host:port`: a name or an IPv4 address and a port, nothing
/// else (no scheme, no chroot).
fn check_zookeeper_host(host: &str) -> anyhow::Result<()> {
    let valid = host.rsplit_once(':').is_some_and(|(name, port)| {
        !name.is_empty()
            && name.len() <= 253
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
            && port.parse::<u16>().is_ok_and(|p| p > 0)
    });
    if !valid {
        bail!("--zookeeper-urls takes host:port entries, got {host:?}");
    }
    Ok(())
}

/// The default instance id: the bound address, with IPv6 brackets dropped.
pub fn instance_id_from(addr: SocketAddr) -> String {
    addr.to_string()
        .chars()
        .filter(|c| !matches!(c, '[' | ']'))
        .collect()
}

impl ServeArgs {
    /// Checks what clap cannot check alone.
    pub fn check(&self) -> anyhow::Result<()> {
        self.limits.check()?;
        // A key's claim lives its TTL: one that could lapse under the request it serves
        // would let that request's own sale be refused as taken over, and nobody sell.
        ensure!(
            self.idempotency_ttl_s.saturating_mul(1_000) > 2 * self.limits.request_timeout_ms,
            "--idempotency-ttl-s ({} s) must exceed twice --request-timeout-ms ({} ms)",
            self.idempotency_ttl_s,
            self.limits.request_timeout_ms
        );
        ensure!(
            self.redis_wait_timeout_ms < self.limits.redis_timeout_ms,
            "--redis-wait-timeout-ms ({}) must be below --redis-timeout-ms ({}), which bounds it",
            self.redis_wait_timeout_ms,
            self.limits.redis_timeout_ms
        );
        ensure!(
            self.redlock_urls.is_empty() || matches!(self.redlock_urls.len(), 3 | 5),
            "--redlock-urls takes 3 or 5 servers, got {}",
            self.redlock_urls.len()
        );
        ensure!(
            self.zookeeper_urls.len() <= 9,
            "--zookeeper-urls takes at most 9 servers, got {}",
            self.zookeeper_urls.len()
        );
        for host in &self.zookeeper_urls {
            check_zookeeper_host(host)?;
        }
        ensure!(
            self.lock_redis_url.is_some()
                || (self.lock_redis_mode.is_none() && self.lock_redis_sentinel_master.is_none()),
            "--lock-redis-mode and --lock-redis-sentinel-master go with --lock-redis-url"
        );
        if let Some(id) = &self.instance_id {
            check_instance_id(id)?;
        }
        if let Some(token) = &self.admin_token {
            ensure!(
                token.len() >= 8,
                "--admin-token must be at least 8 characters"
            );
        }
        Ok(())
    }
}
