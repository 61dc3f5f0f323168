//! The crate's examples, run as a reader would run them, against a real Redis (three for
//! Redlock) and a real ZooKeeper: each checks what it shows and exits non-zero if it does
//! not hold.

use std::path::PathBuf;
use std::process::Command;

use seckill_testkit::{RedisServer, ZooKeeperEnsemble};

/// Every example of the crate, built with every feature.
fn built_examples() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "-p",
            "seckill-lock",
            "--examples",
            "--all-features",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo");
    assert!(status.success(), "building the examples failed");
    // The test binary is target/<profile>/deps/locks-…; the examples sit beside deps.
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("examples")
}

#[test]
fn every_example_runs_and_shows_what_it_says() {
    let dir = built_examples();
    let redis = RedisServer::start();
    let redlock: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let redlock_urls = redlock
        .iter()
        .map(RedisServer::url)
        .collect::<Vec<_>>()
        .join(",");
    let zookeeper = ZooKeeperEnsemble::start(1);
    let examples = [
        "watchdog",
        "token",
        "multi",
        "fenced",
        "redlock",
        "rw",
        "zookeeper",
        "setnx",
    ];
    for example in examples {
        let out = Command::new(dir.join(example))
            .env("REDIS_URL", redis.url())
            .env("REDLOCK_URLS", &redlock_urls)
            .env("ZOOKEEPER_HOSTS", zookeeper.hosts())
            .output()
            .unwrap_or_else(|err| panic!("running example {example}: {err}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "example {example} failed:\n{stdout}\n{stderr}"
        );
        eprintln!("{example}: {}", stdout.trim());
    }
}
