//! A real ZooKeeper ensemble on loopback — the `zookeeper` variant's lock store — started by
//! `scripts/zookeeper.sh`, as the local cluster starts it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{ports, print_log, root, scratch_dir};

/// N ZooKeeper servers (Debian's, on its JRE) forming one ensemble, data in a directory of
/// their own.
pub struct ZooKeeperEnsemble {
    /// Server i (0-based) serves clients on `first_port + i`.
    pub first_port: u16,
    pub servers: usize,
    dir: PathBuf,
}

impl ZooKeeperEnsemble {
    /// `servers` servers (odd), every one of them serving before this returns.
    pub fn start(servers: usize) -> Self {
        let dir = scratch_dir("zookeeper");
        let first_port = ports::start_on_a_free_port(
            "zookeeper",
            || candidate(servers),
            |port| {
                let args = [
                    "start",
                    &dir.display().to_string(),
                    &port.to_string(),
                    &servers.to_string(),
                ];
                match script(&args) {
                    Ok(_) => Ok(port),
                    Err(log) => {
                        let _ = script(&["clean", &dir.display().to_string()]);
                        if log.contains("Address already in use") {
                            return Err(true);
                        }
                        eprintln!("{log}");
                        Err(false)
                    }
                }
            },
        );
        Self {
            first_port,
            servers,
            dir,
        }
    }

    /// What the instances take as `--zookeeper-urls`.
    pub fn hosts(&self) -> String {
        (0..self.servers)
            .map(|i| format!("127.0.0.1:{}", self.port(i)))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn port(&self, server: usize) -> u16 {
        self.first_port + server as u16
    }

    /// What server `server` says it is (`leader`, `follower`), or `None` when it does not
    /// answer as part of a quorum.
    pub fn mode(&self, server: usize) -> Option<String> {
        let answer = self.ask(server, "srvr")?;
        let mode = answer.lines().find_map(|l| l.strip_prefix("Mode: "))?;
        Some(mode.trim().to_owned())
    }

    /// How many ephemeral nodes server `server` knows of (`mntr`'s `zk_ephemerals_count`):
    /// the locks held and waited for.
    pub fn ephemerals(&self, server: usize) -> Option<u64> {
        let answer = self.ask(server, "mntr")?;
        let count = answer
            .lines()
            .find_map(|l| l.strip_prefix("zk_ephemerals_count"))?;
        count.trim().parse().ok()
    }

    /// A four-letter command's answer from server `server`.
    fn ask(&self, server: usize, command: &str) -> Option<String> {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.port(server))).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        conn.write_all(command.as_bytes()).ok()?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer).ok()?;
        Some(answer)
    }

    /// The server that leads now; panics when none does within `within`.
    pub fn wait_for_leader(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) =
                (0..self.servers).find(|&i| self.mode(i).as_deref() == Some("leader"))
            {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no zookeeper leader within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of server `server`'s JVM.
    pub fn pid(&self, server: usize) -> u32 {
        let file = self.dir.join(format!("zk-{}/pid", server + 1));
        std::fs::read_to_string(&file)
            .ok()
            .and_then(|pid| pid.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {}", file.display()))
    }

    /// Kills server `server` (SIGKILL), as a crash would.
    pub fn kill(&self, server: usize) {
        crate::signal(self.pid(server), "KILL");
        let _ = std::fs::remove_file(self.dir.join(format!("zk-{}/pid", server + 1)));
    }
}

impl Drop for ZooKeeperEnsemble {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for i in 1..=self.servers {
                print_log("zookeeper", &self.dir.join(format!("zk-{i}/zookeeper.log")));
            }
        }
        let _ = script(&["clean", &self.dir.display().to_string()]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A first client port such that every port the ensemble takes is free now: clients on
/// first … first+N-1, the quorum on +100 and the election on +200.
fn candidate(servers: usize) -> u16 {
    let offsets: Vec<u16> = (0..servers as u16)
        .flat_map(|i| [i, 100 + i, 200 + i])
        .collect();
    ports::free_base(201 + servers as u16, &offsets)
}

/// `scripts/zookeeper.sh ARGS…`: its output, or its error output and the servers' logs.
fn script(args: &[&str]) -> Result<String, String> {
    let out = Command::new(root().join("scripts/zookeeper.sh"))
        .args(args)
        .output()
        .expect("scripts/zookeeper.sh");
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let dir = args.get(1).map(PathBuf::from).unwrap_or_default();
    let mut logs = String::from_utf8_lossy(&out.stderr).into_owned();
    for i in 1..=9 {
        if let Ok(log) = std::fs::read_to_string(dir.join(format!("zk-{i}/zookeeper.log"))) {
            logs.push_str(&log);
        }
    }
    Err(logs)
}
