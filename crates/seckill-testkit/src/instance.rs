//! One real `seckill serve` process, on a port below the ephemeral range (see
//! [`ports`](crate::ports)) so that a restart finds its port free again.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::{Api, ports, print_log, scratch_dir};

pub struct Instance {
    child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
    /// What it was started with, to start it again ([`restart`](Self::restart)).
    bin: String,
    redis_url: String,
    args: Vec<String>,
}

impl Instance {
    /// `bin serve --listen 127.0.0.1:<a free port> --redis-url <redis_url> <args>`; `bin` is
    /// the service's binary (a test has it as `env!("CARGO_BIN_EXE_seckill")`).
    pub fn start(bin: &str, redis_url: &str, args: &[&str]) -> Self {
        let log = scratch_dir("instance").join("seckill.log");
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let (child, addr) = ports::start_on_a_free_port("seckill", ports::candidate, |port| {
            let before = std::fs::metadata(&log).map_or(0, |m| m.len());
            let listen = format!("127.0.0.1:{port}");
            spawn(bin, &listen, redis_url, &args, &log).map_err(|line| {
                let written = std::fs::read(&log).unwrap_or_default();
                let this_try = written.get(before as usize..).unwrap_or_default();
                let taken = ports::bind_failed(&String::from_utf8_lossy(this_try));
                if !taken {
                    eprintln!("seckill did not start: {line:?}");
                }
                taken
            })
        });
        Self {
            addr,
            child,
            log,
            bin: bin.to_owned(),
            redis_url: redis_url.to_owned(),
            args,
        }
    }

    /// Kills it (SIGKILL) if it is running, and starts it again with the same arguments on
    /// the same address, so that an Nginx in front of it finds it there again; its log goes
    /// on in the same file. Panics when the address stays taken for 5 s.
    pub fn restart(&mut self) {
        self.kill();
        let listen = self.addr.to_string();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match spawn(&self.bin, &listen, &self.redis_url, &self.args, &self.log) {
                Ok((child, _)) => {
                    self.child = child;
                    return;
                }
                Err(line) if std::time::Instant::now() < deadline => {
                    eprintln!("seckill did not start again on {listen} ({line:?}); trying again");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(line) => panic!("seckill did not start again on {listen}: {line:?}"),
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A client of this instance alone.
    pub fn api(&self) -> Api {
        Api::new(&self.url(""))
    }

    /// The most memory the process has held (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("a live instance");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process: a paused holder, as a long GC pause
    /// or a frozen VM would make one.
    pub fn signal(&self, signal: &str) {
        crate::signal(self.pid(), signal);
    }

    /// SIGKILL: the process dies wherever it is, without releasing anything.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bin serve --listen <listen> --redis-url <redis_url> <args>`, its log appended to `log`:
/// the process and the address it bound, or the line it printed instead.
fn spawn(
    bin: &str,
    listen: &str,
    redis_url: &str,
    args: &[String],
    log: &std::path::Path,
) -> Result<(Child, SocketAddr), String> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("a log file");
    let mut child = Command::new(bin)
        .args(["serve", "--listen", listen, "--redis-url", redis_url])
        .args(args)
        // `SECKILL_TEST_LOG` (a `RUST_LOG` filter) to see more of a failing test's instance.
        .env(
            "RUST_LOG",
            std::env::var("SECKILL_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdout(Stdio::piped())
        .stderr(file)
        .spawn()
        .expect("the seckill binary");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("reading the bound address");
    match line.trim().strip_prefix("listening on ") {
        Some(addr) => Ok((child, addr.parse().expect("a socket address"))),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            print_log("seckill", log);
            Err(line)
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log("seckill", &self.log);
        }
        self.kill();
        // Its scratch directory holds only the log, printed above when it mattered.
        if let Some(dir) = self.log.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
