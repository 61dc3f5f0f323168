//! One real `seckill serve` process. It binds port 0 and prints the address it got, so
//! instances never race for ports.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::{Api, print_log, scratch_dir};

pub struct Instance {
    child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Instance {
    /// `bin serve --listen 127.0.0.1:0 --redis-url <redis_url> <args>`; `bin` is the
    /// service's binary (a test has it as `env!("CARGO_BIN_EXE_seckill")`).
    pub fn start(bin: &str, redis_url: &str, args: &[&str]) -> Self {
        let dir = scratch_dir("instance");
        let log = dir.join("seckill.log");
        let mut child = Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--redis-url", redis_url])
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("a log file"))
            .spawn()
            .expect("the seckill binary");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("reading the bound address");
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            print_log("seckill", &log);
            panic!("seckill did not start: {line:?}");
        };
        Self {
            addr: addr.parse().expect("a socket address"),
            child,
            log,
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

impl Drop for Instance {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log("seckill", &self.log);
        }
        self.kill();
    }
}
