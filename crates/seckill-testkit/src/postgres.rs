//! A real PostgreSQL on loopback — the orders' store of record — started by
//! `scripts/postgres.sh`, as the local cluster starts it.

use std::path::PathBuf;
use std::process::Command;

use crate::{ports, print_log, root, scratch_dir};

/// A PostgreSQL server with a database `seckill`, in a data directory of its own.
pub struct Postgres {
    pub port: u16,
    dir: PathBuf,
    running: bool,
}

impl Postgres {
    pub fn start() -> Self {
        let dir = scratch_dir("postgres");
        let port = ports::start_on_a_free_port("postgres", ports::candidate, |port| {
            match script(&["start", &dir.display().to_string(), &port.to_string()]) {
                Ok(_) => Ok(port),
                Err(log) if ports::bind_failed(&log) => Err(true),
                Err(log) => {
                    eprintln!("{log}");
                    print_log("postgres", &dir.join("postgres.log"));
                    Err(false)
                }
            }
        });
        Self {
            port,
            dir,
            running: true,
        }
    }

    /// What the instances take as `--orders-db`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/seckill", self.port)
    }

    /// A fast shutdown: the server is gone until [`restart`](Self::restart).
    pub fn stop(&mut self) {
        if self.running {
            let _ = script(&["stop", &self.dir.display().to_string()]);
            self.running = false;
        }
    }

    /// Started again on the same data and port.
    pub fn restart(&mut self) {
        let dir = self.dir.display().to_string();
        script(&["start", &dir, &self.port.to_string()]).expect("postgres restarts");
        self.running = true;
    }

    /// Sends `signal` to the server and every process of it (its backends and helpers).
    /// `STOP` freezes it with its connections open, as a host gone without a reset leaves
    /// them: what was sent is never answered.
    pub fn signal_all(&self, signal: &str) {
        let listening = Command::new("ss")
            .args(["-Hltnp", &format!("sport = :{}", self.port)])
            .output()
            .expect("ss (iproute2)");
        let listening = String::from_utf8_lossy(&listening.stdout);
        let postmaster = listening
            .split("pid=")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .unwrap_or_else(|| panic!("no postgres listening on :{}: {listening}", self.port));
        let children = Command::new("pgrep")
            .args(["-P", &postmaster.to_string()])
            .output()
            .expect("pgrep");
        let children = String::from_utf8_lossy(&children.stdout);
        crate::signal(postmaster, signal);
        for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            crate::signal(child, signal);
        }
    }

    /// `psql -At -c SQL` against the `seckill` database: what it printed, trimmed.
    pub fn query(&self, sql: &str) -> String {
        let out = Command::new("psql")
            .args([&self.url(), "-qAt", "-c", sql])
            .output()
            .expect("psql (postgresql-client, with the server)");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log("postgres", &self.dir.join("postgres.log"));
        }
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `scripts/postgres.sh ARGS…`: its output, or its error output and the server's log.
fn script(args: &[&str]) -> Result<String, String> {
    let out = Command::new(root().join("scripts/postgres.sh"))
        .args(args)
        .output()
        .expect("scripts/postgres.sh");
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let dir = args.get(1).map(PathBuf::from).unwrap_or_default();
    let log = std::fs::read_to_string(dir.join("postgres.log")).unwrap_or_default();
    Err(format!("{}{log}", String::from_utf8_lossy(&out.stderr)))
}
