//! The command line of `seckill-bench`.

use std::path::PathBuf;

use clap::{Args, Parser};
use seckill::config::RedisArgs;
use seckill::variants::Variant;

use serde::Serialize;

/// Drive the same load at each variant through Nginx and print the comparison: what each
/// sold, oversold and lost, how fast, and what Redis spent on it.
#[derive(Debug, Parser)]
#[command(name = "seckill-bench", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub args: BenchArgs,
}

/// Flags of `seckill-bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Where the load goes: Nginx in front of the instances (or one instance).
    #[arg(
        long,
        env = "SECKILL_BENCH_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,

    /// Where resets go [default: --url]. Nginx serves /admin to loopback clients only.
    #[arg(long)]
    pub admin_url: Option<String>,

    /// Bearer token for /admin, when the instances were started with one.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// The stock store the instances share, as they were told: read with INFO for the
    /// commands and CPU per unit sold (every master, on a Cluster). When it cannot be
    /// reached, or is not the one the instances use, those columns stay empty and the
    /// bench says why.
    #[command(flatten)]
    pub redis: RedisArgs,

    /// What to run: the progression (the default), or a performance suite.
    #[arg(long, value_enum, default_value_t = Suite::Progression)]
    pub suite: Suite,

    /// Instances' own URLs (comma-separated), for the memory suite to read each one's
    /// peak RSS from its /metrics.
    #[arg(long, value_delimiter = ',')]
    pub instance_urls: Vec<String>,

    /// Rounds of the ceiling suite (healthz, lua, lua with batch=off, each round); its ratio
    /// is the median. The orders and capacity suites run their rows in rounds too.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=20))]
    pub rounds: u64,

    /// The instances have Redlock servers (--redlock-urls): the handoff suite adds a
    /// redlock row.
    #[arg(long)]
    pub with_redlock: bool,

    /// The stores suite: the pids of the ZooKeeper ensemble's servers (the instances run
    /// with --zookeeper-urls), whose CPU per unit the zookeeper rows report.
    /// `scripts/cluster.sh lock-store-pids` prints them for the local cluster.
    #[arg(long, value_delimiter = ',')]
    pub zookeeper_pids: Vec<u32>,

    /// The stores suite: the pids of the Redlock servers (the instances run with
    /// --redlock-urls); with them, the suite adds redlock rows.
    #[arg(long, value_delimiter = ',')]
    pub redlock_pids: Vec<u32>,

    /// The stores and seed003 suites: the pid of PostgreSQL's postmaster (the instances
    /// run with --orders-db), whose CPU — its own and its backends' — the `pg_*` rows
    /// report. `scripts/cluster.sh lock-store-pids` prints it for the local cluster.
    #[arg(long)]
    pub postgres_pid: Option<u32>,

    /// The seed003 suite: PostgreSQL's URL (the instances' --orders-db), for the probe of
    /// who may release its locks.
    #[arg(long, hide_env_values = true)]
    pub pg_url: Option<String>,

    /// The seed003 suite: the ZooKeeper ensemble (the instances' --zookeeper-urls), for
    /// the probe of who may release its locks.
    #[arg(long)]
    pub zookeeper_urls: Option<String>,

    /// The seed003 suite: the Redlock servers (the instances' --redlock-urls,
    /// comma-separated), for the probe of who may release its locks.
    #[arg(long, value_delimiter = ',')]
    pub redlock_urls: Vec<String>,

    /// The seed003 suite: each instance's pid file, in --instance-urls' order; the first
    /// instance is SIGKILLed while its holders are inside, and the second measures how
    /// long until it gets in.
    #[arg(long, value_delimiter = ',')]
    pub instance_pid_files: Vec<PathBuf>,

    /// The seed003 suite: the shell command that starts the killed instance again (for
    /// the local cluster, `scripts/cluster.sh start` with the environment it was started
    /// with).
    #[arg(long)]
    pub restart_command: Option<String>,

    /// The partial suite: the pid of the stock store's replica, stopped (SIGSTOP) for a
    /// phase and let go again (SIGCONT).
    #[arg(long)]
    pub replica_pid: Option<u32>,

    /// The partial suite: the pids of two of the Redlock servers, killed (SIGKILL) for its
    /// last row.
    #[arg(long, value_delimiter = ',')]
    pub redlock_down_pids: Vec<u32>,

    /// The partial suite: how long each phase of the stalled-replica rows lasts.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=120))]
    pub phase_seconds: u64,

    /// The capacity suite: the service's binary it starts [default: `seckill` beside this
    /// binary].
    #[arg(long)]
    pub seckill_bin: Option<PathBuf>,

    /// Variants to compare, comma-separated [default: the progression, in its order].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub variants: Vec<Variant>,

    /// Requests per variant.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub requests: u64,

    /// Requests in flight at once (one connection each).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    pub concurrency: u64,

    /// Buyers who compete: request n is a click of buyer `u<(n / clicks) mod users>`
    /// (`user=` in each request). Without it every buyer is new (unique users).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub users: Option<u64>,

    /// Clicks each buyer sends at once (consecutive requests, so they arrive together).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub clicks: u64,

    /// Units one buyer may buy, set by each reset (0: no limit). With --users or --clicks
    /// it shows which variants hold the limit (403s, and `over limit` in the table).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i64).range(0..=1_000))]
    pub per_user: i64,

    /// Send every request with an Idempotency-Key of its own (what a keyed request costs).
    #[arg(long)]
    pub keys: bool,

    /// Units set by the reset before each variant.
    #[arg(long, default_value_t = 500)]
    pub stock: i64,

    /// Shards the stock is split into for the variants that split it (segmented).
    #[arg(long, default_value_t = 8)]
    pub shards: u32,

    #[arg(long, default_value = "101")]
    pub product: String,

    /// Business time inside the critical section (every variant that takes work_ms).
    #[arg(long, default_value_t = 2)]
    pub work_ms: u64,

    /// How long the variants that wait for a lock wait.
    #[arg(long, default_value_t = 5_000)]
    pub wait_ms: u64,

    /// Also run the failure lessons (the page's, on the same terms): setnx's dead holder,
    /// token with work longer than its TTL, and the watchdog on the same terms. Needs
    /// instances started with --faults.
    #[arg(long)]
    pub lessons: bool,

    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Write an SVG chart of goodput and oversell per row here.
    #[arg(long)]
    pub chart: Option<PathBuf>,
}

impl BenchArgs {
    /// The flags a run's JSON records beside its results.
    pub fn settings(&self) -> serde_json::Value {
        serde_json::json!({
            "suite": self.suite,
            "url": self.url,
            "redis_mode": self.redis.redis_mode,
            "requests": self.requests,
            "concurrency": self.concurrency,
            "stock": self.stock,
            "shards": self.shards,
            "work_ms": self.work_ms,
            "wait_ms": self.wait_ms,
            "lessons": self.lessons,
            "users": self.users,
            "clicks": self.clicks,
            "per_user": self.per_user,
            "keys": self.keys,
        })
    }
}

/// What a run measures (`--suite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    /// Every variant under the same load (and the lessons with --lessons).
    Progression,
    /// lua against the no-Redis /healthz through the same Nginx: the lock-free ceiling.
    Ceiling,
    /// Redis commands per unit sold with 200 waiters against one client: watchdog's
    /// pub/sub wait, and token's spin-and-retry for contrast.
    Waiting,
    /// watchdog against segmented with 1 to 64 shards, 2 ms of work in the lock.
    Shards,
    /// Every variant at 200 connections, for p50/p99, every request selling a unit.
    Latency,
    /// 2,000 connections at lua and watchdog; peak RSS per instance (needs --instance-urls).
    Memory,
    /// Lock hand-off: 200 waiters on one lock, with 2 ms of work (lock utilization) and
    /// with none (units/s against one client's lua requests/s).
    Handoff,
    /// The fair lock against the unfair one at 200 waiters: p99 wait against the queue's
    /// length in time, and what fairness costs.
    Fair,
    /// The seed's per-instance shares against segmented x8, with and without work.
    Shares,
    /// A failure of one part stays partial: the stock store's replica stopped under
    /// `--redis-wait-replicas` load (health, `/stats` and other sales beside it), and
    /// Redlock with two of five servers down. Needs --replica-pid and --redlock-down-pids
    /// (`scripts/partial-failure.sh` gives them); not part of `performance`.
    Partial,
    /// Orders of record: lua and watchdog with their orders streamed into PostgreSQL
    /// against kept in Redis only, rounds alternating; and how fast the consumers drain
    /// the streams. Needs instances with --orders-db (`POSTGRES=1 scripts/cluster.sh`).
    Orders,
    /// Seed 000's 20 % rule, measured: optimistic against watchdog and lua with the same
    /// load spread over 1 to 64 products (the conflicts fall as the products grow): the
    /// conflict rate, goodput and units left unsold at each step, and where optimistic
    /// starts to pay.
    Contention,
    /// Redis against ZooKeeper (seed 000's comparison): watchdog, redlock and zookeeper at
    /// 200 waiters on one lock, with no work and with --work-ms: units/s, p99 and the lock
    /// store's CPU per unit. Needs instances with --zookeeper-urls and --zookeeper-pids
    /// (redlock rows with --redlock-urls and --redlock-pids); not part of `performance`.
    Stores,
    /// Seed 003's table of lock schemes, measured whole: the PostgreSQL unique-key and
    /// advisory locks, ZooKeeper, Redis SETNX, the token lock, the watchdog lock and
    /// Redlock at [`WAITERS`] on one lock with no work and with --work-ms; the stock in a
    /// PostgreSQL row (pg_update, pg_for_update) beside lua; then the seed's four
    /// conditions probed (`crate::seed003`). `scripts/seed003.sh` starts what it needs.
    Seed003,
    /// The sale's front door: fairness with and without a waiting room, overload held by
    /// it, the sold-out flag's Redis commands, a bot against its rate limit
    /// (`crate::admission`); not part of `performance`.
    Admission,
    /// A capacity model from measured parts: starts its own Redis, Redis Clusters of one
    /// and three masters, instances, Nginx and PostgreSQL on loopback, and measures the CPU
    /// a unit sold costs each part (lua, watchdog, segmented over --shards), units/s from 1
    /// to 2 instances and from 1 to 3 masters, and the model's prediction beside each
    /// (`crate::capacity`); not part of `performance`.
    Capacity,
    /// All of the performance suites, one after the other.
    Performance,
}

impl Suite {
    pub fn reads_memory(self) -> bool {
        matches!(self, Self::Memory | Self::Performance)
    }
}
