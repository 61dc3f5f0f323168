//! A real `redis-server` on loopback, durable as the project runs it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{ports, print_log, scratch_dir};

/// A real `redis-server` on a free loopback port: AOF with `appendfsync always`, in its own
/// data directory.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    /// Extra `redis-server` arguments (a password, TLS, cluster mode), `{port}` standing
    /// for the port.
    template: Vec<String>,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// With extra `redis-server` arguments; `{port}` in them stands for the chosen port
    /// (for `--tls-port {port} --port 0`).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_on_one_of(ports::candidate, extra)
    }

    /// On a port `candidates` gives, trying another when it turns out taken.
    pub fn start_on_one_of(candidates: impl FnMut() -> u16, extra: &[&str]) -> Self {
        let dir = scratch_dir("redis");
        let template: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
        let (port, child) = ports::start_on_a_free_port("redis-server", candidates, |port| {
            let started = spawn(port, &dir, &with_port(&template, port));
            if started.is_err() {
                // A Cluster node may have written its nodes.conf before failing to bind.
                let _ = std::fs::remove_dir_all(&dir);
                let _ = std::fs::create_dir_all(&dir);
            }
            started.map(|child| (port, child))
        });
        Self {
            child: Some(child),
            port,
            dir,
            template,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the process is still there (not killed by the test).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn log(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A direct connection, to look at what the service left in Redis.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("a connection to the test redis")
    }

    /// Waits until this server, a replica, has synced with its master (`INFO replication`
    /// says its link is up); panics after `within`.
    pub async fn wait_synced(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut self.conn().await)
                .await
                .unwrap_or_default();
            if info.contains("master_link_status:up") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replica :{} did not sync",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends `signal` to the server: `STOP` freezes it as a long pause or a hung host
    /// would (connections stay open, nothing is answered), `CONT` lets it go on.
    pub fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("a running redis-server");
        crate::signal(child.id(), signal);
    }

    /// Kills the server (SIGKILL): what it had not written to its AOF is lost.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and the same AOF (after `kill`: a crash and a
    /// restart).
    pub fn restart(&mut self) {
        self.kill();
        match spawn(self.port, &self.dir, &with_port(&self.template, self.port)) {
            Ok(child) => self.child = Some(child),
            Err(_) => panic!("redis-server did not restart on :{}", self.port),
        }
    }

    /// Starts it again on the same port with its data gone: a Redis that lost everything.
    pub fn restart_empty(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).expect("a scratch directory");
        self.restart();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log("redis-server", &self.log());
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn with_port(template: &[String], port: u16) -> Vec<String> {
    template
        .iter()
        .map(|a| a.replace("{port}", &port.to_string()))
        .collect()
}

/// Starts `redis-server` on `port` with its data in `dir`, and waits until it serves.
/// `Err(true)`: the port was taken.
fn spawn(port: u16, dir: &Path, extra: &[String]) -> Result<Child, bool> {
    let port_arg = port.to_string();
    let plain = !extra.iter().any(|a| a == "--tls-port");
    let log = dir.join("redis.log");
    let from = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
    let mut child = Command::new("redis-server")
        .args(if plain {
            vec!["--port", &port_arg]
        } else {
            vec![]
        })
        .args(["--bind", "127.0.0.1"])
        .args(extra)
        .args([
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (scripts/test.sh installs it)");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let written = std::fs::read_to_string(&log).unwrap_or_default();
        let this_run = written.get(from..).unwrap_or_default();
        if this_run.contains("Ready to accept connections") {
            return Ok(child);
        }
        if child.try_wait().ok().flatten().is_some() {
            if ports::bind_failed(this_run) {
                return Err(true);
            }
            print_log("redis-server", &log);
            return Err(false);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            print_log("redis-server", &log);
            panic!("redis-server on :{port} did not start in 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
