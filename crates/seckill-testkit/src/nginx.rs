//! A real Nginx with the project's config (`nginx/nginx.conf.template` rendered by
//! `scripts/nginx-config.sh`, and `nginx/locations.conf`), in front of some instances.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Instance, ports, print_log, root, scratch_dir};

pub struct Nginx {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
}

impl Nginx {
    /// On loopback, in front of `instances`.
    pub fn start(instances: &[Instance]) -> Self {
        Self::start_on("127.0.0.1", instances)
    }

    /// Listening on `host` (an address of this machine) instead of loopback.
    pub fn start_on(host: &str, instances: &[Instance]) -> Self {
        let upstreams: Vec<SocketAddr> = instances.iter().map(|i| i.addr).collect();
        ports::start_on_a_free_port("nginx", ports::candidate, |port| {
            Self::start_at(host, port, &upstreams).ok_or(true)
        })
    }

    /// On `host:port`, chosen beforehand (for instances that must know it: `--bench-url`);
    /// `None` when the port turned out taken.
    pub fn start_at(host: &str, port: u16, upstreams: &[SocketAddr]) -> Option<Self> {
        let dir = scratch_dir("nginx");
        std::fs::create_dir_all(dir.join("nginx-tmp")).unwrap();
        let rendered = Command::new(root().join("scripts/nginx-config.sh"))
            .arg(&dir)
            .arg(format!("{host}:{port}"))
            .arg("1")
            .args(upstreams.iter().map(SocketAddr::to_string))
            .output()
            .expect("scripts/nginx-config.sh");
        assert!(
            rendered.status.success(),
            "{}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, rendered.stdout).unwrap();
        let errors = dir.join("nginx-error.log");
        let mut child = Command::new(binary())
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(&errors)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx must be installed (scripts/test.sh installs it)");
        // Nginx writes its pid file once it listens.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dir.join("nginx.pid").exists() {
            if child.try_wait().ok().flatten().is_some() {
                let log = std::fs::read_to_string(&errors).unwrap_or_default();
                if !ports::bind_failed(&log) {
                    print_log("nginx", &errors);
                    panic!("nginx did not start");
                }
                let _ = std::fs::remove_dir_all(&dir);
                return None;
            }
            assert!(Instant::now() < deadline, "nginx did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(Self {
            child: Some(child),
            port,
            dir,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

/// `nginx` on the PATH, or Debian's /usr/sbin/nginx (not on a normal user's PATH).
pub fn binary() -> String {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|dir| format!("{dir}/nginx"))
        .find(|path| std::path::Path::new(path).exists())
        .unwrap_or_else(|| "/usr/sbin/nginx".into())
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log("nginx", &self.dir.join("nginx-error.log"));
        }
        if let Some(mut child) = self.child.take() {
            // SIGTERM, so the master takes its workers down with it.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
