//! Real servers on loopback for seckill's tests, each test with its own: a durable
//! `redis-server`, a Redis Cluster, a master watched by sentinels, Nginx with the project's
//! config, `seckill serve` instances, and [`Api`], a handle on the HTTP API.
//!
//! Every server is started on a port that was free a moment before; when another process
//! takes it in between, the server fails to bind, and the start is tried again on another
//! port, so tests never race for ports. Every server's log is printed when a test fails,
//! and every process is stopped when its handle is dropped.
//!
//! # Layout
//!
//! - [`redis`] — [`RedisServer`]; [`cluster`] — [`RedisCluster`]; [`sentinel`] —
//!   [`Sentinels`].
//! - [`nginx`] — [`Nginx`] in front of some instances; [`instance`] — [`Instance`], one
//!   `seckill serve` process; [`service`] — [`Service`], one Redis and N instances.
//! - [`api`] — [`Api`]: deductions, resets, the audit, loads, as a client sends them.
//! - [`audit`] — what `/stats` says of a sale that went right, said once:
//!   [`assert_exact`] (nothing oversold or lost, no overlap, the stock and the orders add
//!   up), [`assert_sold_out`], [`assert_adds_up`], [`assert_every_200_an_order`],
//!   [`assert_orders_recorded`].
//! - [`failover`] — what must hold after a store fails over under load; [`partial`] — what
//!   must hold while one part is down: the rest answers as before.
//! - [`postgres`] — [`Postgres`], the orders' store of record; [`zookeeper`] —
//!   [`ZooKeeperEnsemble`], the `zookeeper` variant's lock store.
//! - [`ports`] — candidate ports and the retry behind every start.

pub mod api;
pub mod audit;
pub mod cluster;
pub mod failover;
pub mod instance;
pub mod nginx;
pub mod partial;
pub mod ports;
pub mod postgres;
pub mod redis;
pub mod sentinel;
pub mod service;
pub mod zookeeper;

pub use api::{Api, int};
pub use audit::{
    assert_adds_up, assert_every_200_an_order, assert_exact, assert_orders_recorded,
    assert_sold_out,
};
pub use cluster::RedisCluster;
pub use failover::assert_survived_failover;
pub use instance::Instance;
pub use nginx::Nginx;
pub use postgres::Postgres;
pub use redis::RedisServer;
pub use seckill_load::{Control, Load, Method, Report};
pub use sentinel::Sentinels;
pub use service::Service;
pub use zookeeper::ZooKeeperEnsemble;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Mutex, MutexGuard};

/// The workspace's root, where `scripts/` and `nginx/` are.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/seckill-testkit sits two levels under the root")
        .to_path_buf()
}

/// One heavy test at a time in a test binary.
static HEAVY: Mutex<()> = Mutex::const_new(());

/// Heavy tests (thousands of connections, servers killed under load, a browser) take their
/// turn through this: on two cores, two of them at once would measure each other. Light
/// tests run beside them as usual. (An async mutex: each test has a runtime of its own, and
/// one test's wait must not block another's thread.)
pub async fn heavy_turn() -> MutexGuard<'static, ()> {
    HEAVY.lock().await
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`) to process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// [`heavy_turn`] for a test that is not async.
pub fn heavy_turn_blocking() -> MutexGuard<'static, ()> {
    HEAVY.blocking_lock()
}

/// `redis-cli -p PORT ARGS…` against a loopback server; what it printed.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli must be installed (scripts/test.sh installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A directory of the test's own under the system's temporary directory.
pub fn scratch_dir(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "seckill-test-{}-{what}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// The last lines of a server's log, on stderr (where the test harness shows them).
pub fn print_log(name: &str, path: &Path) {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(60).collect();
    eprintln!("----- {name} log ({}) -----", path.display());
    for line in tail.into_iter().rev() {
        eprintln!("{line}");
    }
}
