//! `scripts/cluster.sh start` is idempotent, as the README says, with every option: a
//! second start leaves what runs alone and starts again what died.

use std::path::PathBuf;
use std::process::{Command, Output};

use seckill_testkit::{Api, heavy_turn, root, scratch_dir};

use crate::SECKILL;

/// A run of `scripts/cluster.sh` in a folder of its own, on ports of its own; cleaned
/// (everything stopped, the data deleted) when dropped, even when the test fails.
struct ClusterRun {
    dir: PathBuf,
    env: Vec<(&'static str, String)>,
}

impl ClusterRun {
    fn new() -> Self {
        let dir = scratch_dir("cluster-sh");
        let base = free_base();
        let port = |offset: u16| (base + offset).to_string();
        let env = vec![
            ("RUN_DIR", dir.display().to_string()),
            ("SKIP_BUILD", "1".to_owned()),
            ("BIN", SECKILL.to_owned()),
            ("INSTANCES", "2".to_owned()),
            ("FIRST_PORT", port(0)),
            ("NGINX_PORT", port(2)),
            ("REDIS_PORT", port(3)),
            ("POSTGRES", "1".to_owned()),
            ("POSTGRES_PORT", port(4)),
            ("REDLOCK_SERVERS", "5".to_owned()),
            ("REDLOCK_PORT", port(10)),
            ("ZOOKEEPER", "3".to_owned()),
            ("ZOOKEEPER_PORT", port(20)),
        ];
        Self { dir, env }
    }

    fn run(&self, command: &str) -> std::io::Result<Output> {
        Command::new(root().join("scripts/cluster.sh"))
            .arg(command)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
    }

    fn start(&self) {
        let out = self.run("start").expect("scripts/cluster.sh");
        assert!(
            out.status.success(),
            "cluster.sh start failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn port(&self, name: &str) -> u16 {
        let value = &self.env.iter().find(|(k, _)| *k == name).expect("a port").1;
        value.parse().expect("a port number")
    }

    /// SIGKILL of the process whose pid file is `pid_file` (under the run folder).
    fn kill(&self, pid_file: &str) {
        let pid = std::fs::read_to_string(self.dir.join(pid_file)).expect("a pid file");
        seckill_testkit::signal(pid.trim().parse().expect("a pid"), "KILL");
    }

    fn alive(&self, pid_file: &str) -> bool {
        let Ok(pid) = std::fs::read_to_string(self.dir.join(pid_file)) else {
            return false;
        };
        let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim()));
        status.is_ok_and(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
    }
}

impl Drop for ClusterRun {
    fn drop(&mut self) {
        // Never a panic here: a drop that panics while the test unwinds aborts it, and
        // leaves behind what it was to stop.
        match self.run("clean") {
            Ok(out) if !out.status.success() => {
                eprintln!("cluster.sh clean: {}", String::from_utf8_lossy(&out.stderr));
            }
            Ok(_) => {}
            Err(err) => eprintln!("cluster.sh clean: {err}"),
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A base port such that base … base+22 and ZooKeeper's quorum and election ports
/// (+120 …, +220 …) are free now.
fn free_base() -> u16 {
    let wanted: Vec<u16> = (0..23).chain(120..123).chain(220..223).collect();
    seckill_testkit::ports::free_base(223, &wanted)
}

/// With PostgreSQL, five Redlock servers and a three-server ZooKeeper ensemble: a second
/// `start` succeeds and changes nothing; after an instance, a Redlock server and a ZooKeeper
/// server are killed, a third brings each of them back, and the cluster sells through
/// Nginx with the variants that need them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_start_is_idempotent_with_every_option() {
    let _turn = heavy_turn().await;
    let run = ClusterRun::new();
    tokio::task::block_in_place(|| run.start());
    let first = std::fs::read_to_string(run.dir.join("seckill-1.pid")).unwrap();
    tokio::task::block_in_place(|| run.start());
    let again = std::fs::read_to_string(run.dir.join("seckill-1.pid")).unwrap();
    assert_eq!(
        first, again,
        "a second start leaves a running instance alone"
    );

    let redlock = format!("redis-redlock-{}.pid", run.port("REDLOCK_PORT"));
    run.kill("seckill-1.pid");
    run.kill(&redlock);
    run.kill("zk-2/pid");
    // Gone once their processes are (the bound says a hang).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while run.alive("seckill-1.pid") || run.alive(&redlock) || run.alive("zk-2/pid") {
        assert!(
            std::time::Instant::now() < until,
            "a killed process lives on"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    tokio::task::block_in_place(|| run.start());
    for pid_file in [
        "seckill-1.pid",
        "seckill-2.pid",
        &redlock,
        "zk-2/pid",
        "nginx.pid",
    ] {
        assert!(run.alive(pid_file), "{pid_file} runs again");
    }
    assert!(
        run.dir.join("postgres").exists(),
        "PostgreSQL's data folder"
    );

    let api = Api::new(&format!("http://127.0.0.1:{}", run.port("NGINX_PORT")));
    api.reset("501", 10, 1).await;
    for variant in ["lua", "redlock", "zookeeper"] {
        let (status, body) = api.deduct("501", variant).await;
        assert_eq!(status, 200, "{variant}: {body}");
    }
}
