//! A real master with replicas, watched by three real Redis Sentinels, each process on a
//! free loopback port with its own directory; sentinels agree on a failover within a few
//! seconds (`down-after-milliseconds` 1000).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{RedisServer, ports, print_log, redis_cli, scratch_dir};

/// The name the sentinels know the master by.
pub const MASTER: &str = "seckill";

pub struct Sentinel {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl Sentinel {
    fn start(master_port: u16) -> Self {
        ports::start_on_a_free_port("redis-sentinel", ports::candidate, |port| {
            Self::start_on(port, master_port)
        })
    }

    /// `Err(true)`: the port was taken.
    fn start_on(port: u16, master_port: u16) -> Result<Self, bool> {
        let dir = scratch_dir("sentinel");
        let log = dir.join("sentinel.log");
        let config = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {log}\n\
             sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 5000\n\
             sentinel parallel-syncs {MASTER} 1\n",
            dir = dir.display(),
            log = log.display(),
        );
        let conf = dir.join("sentinel.conf");
        std::fs::write(&conf, config).unwrap();
        let mut child = Command::new("redis-sentinel")
            .arg(&conf)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-sentinel must be installed (scripts/test.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let written = std::fs::read_to_string(&log).unwrap_or_default();
            // Logged once it listens and monitors the master.
            if written.contains("+monitor master") {
                return Ok(Self { child, port, dir });
            }
            if child.try_wait().ok().flatten().is_some() {
                let taken = ports::bind_failed(&written);
                if !taken {
                    print_log("redis-sentinel", &log);
                }
                let _ = std::fs::remove_dir_all(&dir);
                return Err(taken);
            }
            assert!(Instant::now() < deadline, "redis-sentinel did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log("redis-sentinel", &self.dir.join("sentinel.log"));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master, its replicas and three sentinels.
pub struct Sentinels {
    pub master: RedisServer,
    pub replicas: Vec<RedisServer>,
    pub sentinels: Vec<Sentinel>,
}

impl Sentinels {
    /// A master with `replicas` replicas, all in sync, and three sentinels that know them.
    pub fn start(replicas: usize) -> Self {
        let master = RedisServer::start();
        let port = master.port.to_string();
        let replicas: Vec<RedisServer> = (0..replicas)
            .map(|_| {
                RedisServer::start_with(&[
                    "--replicaof",
                    "127.0.0.1",
                    &port,
                    "--repl-diskless-sync-delay",
                    "0",
                ])
            })
            .collect();
        let sentinels = (0..3).map(|_| Sentinel::start(master.port)).collect();
        let setup = Self {
            master,
            replicas,
            sentinels,
        };
        setup.wait_until_known();
        setup
    }

    /// The sentinels' URLs, as an instance in sentinel mode takes them.
    pub fn urls(&self) -> String {
        self.sentinels
            .iter()
            .map(Sentinel::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    fn cli(port: u16, args: &[&str]) -> String {
        redis_cli(port, args)
    }

    /// The port of the master the sentinels name now.
    pub fn master_port(&self) -> Option<u16> {
        let answer = Self::cli(
            self.sentinels[0].port,
            &["sentinel", "get-master-addr-by-name", MASTER],
        );
        answer.lines().nth(1)?.trim().parse().ok()
    }

    /// Every replica in sync, and every sentinel knows every replica and the others.
    fn wait_until_known(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let synced = self.replicas.iter().all(|r| {
                let info = Self::cli(r.port, &["info", "replication"]);
                info.contains("master_link_status:up") && info.contains("master_sync_in_progress:0")
            });
            let known = self.sentinels.iter().all(|s| {
                let info = Self::cli(s.port, &["sentinel", "master", MASTER]);
                let field = |name: &str| {
                    let lines: Vec<&str> = info.lines().collect();
                    lines
                        .iter()
                        .position(|l| *l == name)
                        .and_then(|i| lines.get(i + 1))
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0)
                };
                field("num-slaves") == self.replicas.len() && field("num-other-sentinels") == 2
            });
            if synced && known {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinels did not learn the topology"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every sentinel told to watch the server on `port` as the master instead, as an
    /// operator who moved the master by hand does; returns once each names it.
    pub fn monitor(&self, port: u16) {
        let port = port.to_string();
        for sentinel in &self.sentinels {
            Self::cli(sentinel.port, &["sentinel", "remove", MASTER]);
            let said = Self::cli(
                sentinel.port,
                &["sentinel", "monitor", MASTER, "127.0.0.1", &port, "2"],
            );
            assert!(said.starts_with("OK"), "sentinel monitor: {said}");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.sentinels.iter().all(|s| {
            let answer = Self::cli(s.port, &["sentinel", "get-master-addr-by-name", MASTER]);
            answer.lines().nth(1).map(str::trim) == Some(port.as_str())
        }) {
            assert!(
                Instant::now() < deadline,
                "the sentinels did not take :{port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the sentinels name a master other than `old`, and it answers as one.
    pub fn wait_for_failover(&self, old: u16, within: Duration) -> u16 {
        let deadline = Instant::now() + within;
        loop {
            if let Some(port) = self.master_port()
                && port != old
                && Self::cli(port, &["role"]).starts_with("master")
            {
                return port;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinels did not fail over in {within:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
