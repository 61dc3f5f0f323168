//! The real parts the suite measures, started on free loopback ports by `seckill-testkit`
//! (as the tests start them) and stopped when dropped: durable redis-servers or Redis
//! Clusters, `seckill serve` instances, Nginx with the project's config (one worker), and
//! PostgreSQL for the orders when it can run here.
//!
//! Everything here blocks (processes are started and waited for): call it from
//! [`blocking`], where a start that fails (the testkit panics, having printed the
//! server's log) comes back as an error.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use seckill::config::RedisArgs;
use seckill::store::RedisMode;
use seckill_testkit::{Instance, Nginx, Postgres, RedisCluster, RedisServer, redis_cli};

use crate::parts_cpu::Pids;

/// Runs `start` on a thread that may block, a panic in it an error naming `what`.
pub async fn blocking<T: Send + 'static>(
    what: &str,
    start: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    match tokio::task::spawn_blocking(start).await {
        Ok(result) => result,
        Err(err) => bail!("{what} failed ({err}); its log is above"),
    }
}

/// Stops `parts` (drops them: their processes are killed and waited for) off the runtime.
pub async fn stop<T: Send + 'static>(what: &str, parts: T) -> anyhow::Result<()> {
    blocking(what, move || {
        drop(parts);
        Ok(())
    })
    .await
}

/// Whether PostgreSQL can run here: its binaries are installed, and, as root, there is a
/// `postgres` user for `scripts/postgres.sh` to run it as (it refuses root).
pub fn postgres_missing() -> Option<String> {
    let installed = std::fs::read_dir("/usr/lib/postgresql")
        .map(|versions| {
            versions
                .flatten()
                .any(|v| v.path().join("bin/pg_ctl").exists())
        })
        .unwrap_or(false);
    if !installed {
        return Some("PostgreSQL is not installed (scripts/install-deps.sh installs it)".into());
    }
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let uid = s.lines().find_map(|l| l.strip_prefix("Uid:"))?;
            uid.split_whitespace().next().map(|u| u == "0")
        })
        .unwrap_or(false);
    let user = std::fs::read_to_string("/etc/passwd")
        .is_ok_and(|p| p.lines().any(|l| l.starts_with("postgres:")));
    (root && !user).then(|| "running as root with no postgres user to run PostgreSQL as".into())
}

/// A PostgreSQL for the orders, and its postmaster's pid.
pub fn start_postgres() -> anyhow::Result<(Postgres, u32)> {
    let postgres = Postgres::start();
    let dir = postgres.query("SHOW data_directory");
    let file = Path::new(&dir).join("postmaster.pid");
    let pid = std::fs::read_to_string(&file)
        .ok()
        .and_then(|s| s.lines().next()?.trim().parse().ok())
        .with_context(|| format!("reading the postmaster's pid from {}", file.display()))?;
    Ok((postgres, pid))
}

/// One durable redis-server, two instances on it, and two Nginx: one in front of the first
/// instance, one in front of both. Fields drop in order: Nginx and the instances before
/// the stores they use.
pub struct TwoInstances {
    nginx: [Nginx; 2],
    /// Held only to be stopped when the setup is dropped.
    _instances: Vec<Instance>,
    redis: RedisServer,
    postgres: Option<Postgres>,
    pub pids: Pids,
}

impl TwoInstances {
    pub fn start(bin: &Path, postgres: Option<(Postgres, u32)>) -> anyhow::Result<Self> {
        let redis = RedisServer::start();
        let (postgres, postgres_pid) = postgres.unzip();
        let orders = postgres.as_ref().map(Postgres::url);
        let mut args = Vec::new();
        if let Some(url) = &orders {
            args.extend(["--orders-db", url.as_str()]);
        }
        let instances = start_instances(bin, &redis.url(), &args);
        let (one, one_pid) = start_nginx(&instances[..1])?;
        let (two, two_pid) = start_nginx(&instances)?;
        let pids = Pids {
            nginx: vec![one_pid, two_pid],
            instances: instances.iter().map(Instance::pid).collect(),
            redis: vec![redis_pid(redis.port)?],
            postgres: postgres_pid,
        };
        Ok(Self {
            nginx: [one, two],
            _instances: instances,
            redis,
            postgres,
            pids,
        })
    }

    /// Nginx in front of one instance (`1`) or both (`2`).
    pub fn url(&self, instances: usize) -> String {
        self.nginx[instances - 1].url("")
    }

    pub fn redis(&self) -> RedisArgs {
        redis_args(&self.redis.url(), RedisMode::Standalone)
    }

    pub fn has_postgres(&self) -> bool {
        self.postgres.is_some()
    }
}

/// A Redis Cluster of `masters` masters (no replicas, every node durable), two instances
/// on it in cluster mode, and Nginx in front of both.
pub struct OnCluster {
    nginx: Nginx,
    /// Held only to be stopped when the setup is dropped.
    _instances: Vec<Instance>,
    cluster: RedisCluster,
    pub pids: Pids,
}

impl OnCluster {
    pub fn start(bin: &Path, masters: usize) -> anyhow::Result<Self> {
        let cluster = RedisCluster::start(masters, 0);
        let instances = start_instances(bin, &cluster.urls(), &["--redis-mode", "cluster"]);
        let (nginx, nginx_pid) = start_nginx(&instances)?;
        let redis = cluster
            .nodes
            .iter()
            .map(|n| redis_pid(n.port))
            .collect::<anyhow::Result<_>>()?;
        let pids = Pids {
            nginx: vec![nginx_pid],
            instances: instances.iter().map(Instance::pid).collect(),
            redis,
            postgres: None,
        };
        Ok(Self {
            nginx,
            _instances: instances,
            cluster,
            pids,
        })
    }

    pub fn url(&self) -> String {
        self.nginx.url("")
    }

    pub fn redis(&self) -> RedisArgs {
        redis_args(&self.cluster.urls(), RedisMode::Cluster)
    }
}

fn start_instances(bin: &Path, redis_url: &str, args: &[&str]) -> Vec<Instance> {
    let bin = bin.display().to_string();
    (0..2)
        .map(|_| Instance::start(&bin, redis_url, args))
        .collect()
}

/// Nginx in front of `instances`, and its master's pid: the one child of this process
/// called nginx that was not there before.
fn start_nginx(instances: &[Instance]) -> anyhow::Result<(Nginx, u32)> {
    let before = nginx_children();
    let nginx = Nginx::start(instances);
    let pid = nginx_children()
        .into_iter()
        .find(|pid| !before.contains(pid))
        .context("the Nginx just started is not among this process's children")?;
    Ok((nginx, pid))
}

/// This process's children called `nginx` (Nginx's masters; their workers are theirs).
fn nginx_children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let named = stat.contains("(nginx)");
            (named && crate::lock_store::parent(&stat) == Some(me)).then_some(pid)
        })
        .collect()
}

/// The pid of the redis-server on `port`, as its `INFO` says.
fn redis_pid(port: u16) -> anyhow::Result<u32> {
    let info = redis_cli(port, &["info", "server"]);
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
        .with_context(|| format!("no process_id in the INFO of :{port}"))
}

fn redis_args(urls: &str, mode: RedisMode) -> RedisArgs {
    RedisArgs {
        redis_url: urls.to_owned(),
        redis_mode: mode,
        redis_sentinel_master: None,
        redis_tls_ca: None,
    }
}

/// The service's binary: `--seckill-bin`, or `seckill` beside this binary (a build of the
/// workspace makes both).
pub fn seckill_binary(given: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    let bin = match given {
        Some(bin) => bin.clone(),
        None => std::env::current_exe()?.with_file_name("seckill"),
    };
    if !bin.exists() {
        bail!(
            "no service binary at {} (build it: cargo build --release -p seckill, or give --seckill-bin)",
            bin.display()
        );
    }
    Ok(bin)
}
