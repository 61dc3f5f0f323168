//! The command line of `seckill-bench`.

use std::path::PathBuf;

use clap::{Args, Parser};
use seckill::config::RedisArgs;
use seckill::variants::Variant;

use crate::suites::Suite;

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
    /// is the median.
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
