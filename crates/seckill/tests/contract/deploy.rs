//! docker-compose.yml, the Nginx configs, the Dockerfile and the service's flags agree.
//! Nothing here can run Docker, so this is what keeps the compose topology honest.

use std::collections::BTreeSet;
use std::process::Command;

use seckill_testkit::{nginx, root};

use crate::SECKILL;

pub(crate) fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `seckill serve --help`: the flags and environment variables the binary knows.
pub(crate) fn serve_help() -> String {
    let output = Command::new(SECKILL)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    String::from_utf8(output.stdout).unwrap()
}

/// The `command:` lists of the compose file's seckill services, by service name. They are
/// written as one-line flow sequences of quoted strings, which are JSON arrays.
fn compose_commands(compose: &str) -> Vec<(String, Vec<String>)> {
    let mut service = String::new();
    let mut commands = Vec::new();
    for line in compose.lines() {
        if let Some(name) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':'))
            && !name.starts_with(' ')
        {
            service = name.to_owned();
        }
        if let Some(list) = line.trim().strip_prefix("command: ")
            && service.starts_with("seckill")
        {
            let command = serde_json::from_str(list).expect("a JSON-style list");
            commands.push((service.clone(), command));
        }
    }
    commands
}

fn flag_value<'a>(command: &'a [String], flag: &str) -> Option<&'a str> {
    command
        .iter()
        .position(|arg| arg == flag)
        .and_then(|i| command.get(i + 1))
        .map(String::as_str)
}

/// Every seckill service in the compose file is an upstream server in nginx/docker.conf,
/// on the port it listens on, and nothing else is.
#[test]
fn compose_services_are_nginx_upstreams() {
    let compose = read("docker-compose.yml");
    let from_compose: BTreeSet<String> = compose_commands(&compose)
        .into_iter()
        .map(|(service, command)| {
            let listen = flag_value(&command, "--listen").expect("each instance names --listen");
            let port = listen.rsplit(':').next().unwrap();
            format!("{service}:{port}")
        })
        .collect();
    assert!(
        from_compose.len() >= 2,
        "two or more instances: {from_compose:?}"
    );
    let from_nginx: BTreeSet<String> = read("nginx/docker.conf")
        .lines()
        .filter_map(|line| line.trim().strip_prefix("server "))
        .map(|rest| rest.split_whitespace().next().unwrap().to_owned())
        .filter(|address| address != "{") // the `server {` block, not an upstream server
        .collect();
    assert_eq!(from_compose, from_nginx);
}

/// Every flag and environment variable the compose file and the Dockerfile give the
/// service is one `seckill serve` knows.
#[test]
fn compose_and_dockerfile_use_real_flags() {
    let help = serve_help();
    let compose = read("docker-compose.yml");
    for (service, command) in compose_commands(&compose) {
        assert_eq!(command[0], "serve", "{service}");
        for flag in command.iter().filter(|a| a.starts_with("--")) {
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                "{service}: unknown flag {flag}"
            );
        }
        assert_eq!(
            flag_value(&command, "--instance-id"),
            Some(service.as_str()),
            "instance ids name the service"
        );
    }
    for var in compose
        .lines()
        .filter_map(|l| l.trim().split(':').next())
        .filter(|k| k.starts_with("SECKILL_"))
    {
        assert!(
            help.contains(&format!("[env: {var}")),
            "compose sets {var}, which serve does not read"
        );
    }
    let dockerfile = read("Dockerfile");
    let cmd = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("a CMD");
    let cmd: Vec<String> = serde_json::from_str(cmd).unwrap();
    for flag in cmd.iter().filter(|a| a.starts_with("--")) {
        assert!(
            help.contains(flag.as_str()),
            "Dockerfile: unknown flag {flag}"
        );
    }
}

/// The compose file's Redis is durable as the local one is: AOF with appendfsync always,
/// its data directory on a named volume that outlives the container.
#[test]
fn compose_redis_is_durable() {
    let compose = read("docker-compose.yml");
    let command = compose
        .lines()
        .find(|l| l.trim_start().starts_with("command: [\"redis-server\""))
        .expect("a redis-server command");
    for pair in [
        "\"--appendonly\", \"yes\"",
        "\"--appendfsync\", \"always\"",
        "\"--dir\", \"/data\"",
    ] {
        assert!(command.contains(pair), "redis runs with {pair}: {command}");
    }
    assert!(compose.contains("- redis-data:/data"), "/data is a volume");
    assert!(
        compose.contains("volumes:\n  redis-data:"),
        "the volume is declared"
    );
}

/// Nginx in compose gets both config files, where docker.conf expects locations.conf.
#[test]
fn compose_mounts_the_nginx_configs_where_they_are_included() {
    let compose = read("docker-compose.yml");
    let docker_conf = read("nginx/docker.conf");
    let include = docker_conf
        .lines()
        .find_map(|l| l.trim().strip_prefix("include "))
        .map(|p| p.trim_end_matches(';'))
        .expect("docker.conf includes locations.conf");
    assert!(
        compose.contains(&format!("./nginx/locations.conf:{include}:ro")),
        "mounted at {include}"
    );
    assert!(compose.contains("./nginx/docker.conf:/etc/nginx/conf.d/default.conf:ro"));
}

/// Both Nginx configs pass `nginx -t`: the local template as scripts/cluster.sh renders it,
/// and docker.conf with its service names pointed at loopback.
#[test]
fn nginx_configs_pass_nginx_t() {
    let dir = std::env::temp_dir().join(format!("seckill-nginx-t-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("nginx-tmp")).unwrap();
    let rendered = Command::new(root().join("scripts/nginx-config.sh"))
        .arg(&dir)
        .args(["127.0.0.1:18080", "1", "127.0.0.1:18081", "127.0.0.1:18082"])
        .output()
        .unwrap();
    assert!(rendered.status.success());
    let local = String::from_utf8(rendered.stdout).unwrap();
    let docker = read("nginx/docker.conf")
        .replace("seckill-1", "127.0.0.1")
        .replace("seckill-2", "127.0.0.1")
        .replace(
            "/etc/nginx/seckill/locations.conf",
            &root().join("nginx/locations.conf").display().to_string(),
        );
    let docker_main = format!(
        "pid {d}/docker.pid;\nevents {{}}\nhttp {{\n{docker}\n}}\n",
        d = dir.display()
    );
    for (name, config) in [("local", local), ("docker", docker_main)] {
        let path = dir.join(format!("{name}.conf"));
        std::fs::write(&path, config).unwrap();
        let output = Command::new(nginx::binary())
            .arg("-t")
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&path)
            .arg("-e")
            .arg(dir.join("error.log"))
            .output()
            .expect("nginx must be installed (scripts/test.sh installs it)");
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A key's claim must outlive the request it serves: an idempotency TTL that a request's
/// timeout could outlast is refused at start, naming the flags, before anything is served.
#[test]
fn an_idempotency_ttl_a_request_could_outlast_is_refused_at_start() {
    let mut child = Command::new(SECKILL)
        .args([
            "serve",
            "--idempotency-ttl-s",
            "30",
            "--request-timeout-ms",
            "30000",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A guard, not a window: an instance that does start is stopped here, and fails below.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{said}");
    assert!(
        said.contains("--idempotency-ttl-s (30 s) must exceed twice --request-timeout-ms"),
        "{said}"
    );
}
