//! `scripts/failover-lesson.sh` as a test: real sentinels fail a lock store over, a real
//! ZooKeeper ensemble loses its leader and a holder's session, and the seven rows come out
//! as the lesson says.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use seckill_testkit::{heavy_turn_blocking, ports, root, scratch_dir};
use serde_json::Value;

use crate::SECKILL;

/// The ports the script takes from its base: its Redis servers, sentinels, instances and
/// Nginx, and the ZooKeeper ensemble's client, quorum and election ports.
fn lesson_ports(base: u16) -> impl Iterator<Item = u16> {
    (0..15)
        .chain([20, 21, 22, 120, 121, 122, 220, 221, 222])
        .map(move |i| base + i)
}

/// A base from which every port the script takes is free.
fn free_port_base() -> u16 {
    let offsets: Vec<u16> = lesson_ports(0).collect();
    seckill_testkit::ports::free_base(223, &offsets)
}

/// unprotected: two holders inside, the unit sold twice; wait_replicas: no overlap (the
/// unconfirmed lock is given back); redlock: no overlap, sold once; fenced: the overlap
/// happens and the stock refuses the older holder, nothing oversold. On ZooKeeper:
/// zookeeper_leader: no overlap, sold once, without fencing; zookeeper_paused: the paused
/// holder sells the unit again; zookeeper_fenced: it is refused. Nothing is left running
/// afterwards.
#[test]
fn failover_lesson_rows() {
    let _turn = heavy_turn_blocking();
    let run_dir = scratch_dir("failover-lesson");
    // The script starts its servers on a run of ports that were free a moment before; when
    // one of them was taken in between, it is run again on another run.
    let (base, out) = (0..ports::TRIES)
        .map(|_| {
            let base = free_port_base();
            let _ = std::fs::remove_dir_all(&run_dir);
            (base, run_lesson(&run_dir, base))
        })
        .find(|(_, out)| out.status.success() || !port_was_taken(&run_dir))
        .expect("a run of free ports");
    let printed = String::from_utf8_lossy(&out.stdout);
    let said = String::from_utf8_lossy(&out.stderr);
    println!("{printed}");
    assert!(out.status.success(), "the lesson failed: {said}");

    let rows: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("lesson.json")).unwrap())
            .expect("lesson.json is a list of rows");
    let row = |setting: &str| {
        rows.iter()
            .find(|r| r["setting"] == setting)
            .unwrap_or_else(|| panic!("no {setting} row: {rows:?}"))
            .clone()
    };
    let int = |r: &Value, f: &str| r[f].as_i64().unwrap_or_else(|| panic!("{f} in {r}"));

    let unprotected = row("unprotected");
    assert!(int(&unprotected, "lock_overlaps") >= 1, "{unprotected}");
    assert_eq!(int(&unprotected, "oversold"), 1, "{unprotected}");
    assert_eq!(int(&unprotected, "sold"), 2, "{unprotected}");

    let wait = row("wait_replicas");
    assert_eq!(int(&wait, "lock_overlaps"), 0, "{wait}");
    assert_eq!(int(&wait, "oversold"), 0, "{wait}");
    assert_eq!(wait["first"], "lock_unconfirmed", "{wait}");

    let redlock = row("redlock");
    assert_eq!(int(&redlock, "lock_overlaps"), 0, "{redlock}");
    assert_eq!(int(&redlock, "oversold"), 0, "{redlock}");
    assert_eq!(int(&redlock, "sold"), 1, "{redlock}");

    let fenced = row("fenced");
    assert!(
        int(&fenced, "lock_overlaps") >= 1,
        "the overlap still happens: {fenced}"
    );
    assert_eq!(int(&fenced, "oversold"), 0, "{fenced}");
    assert_eq!(int(&fenced, "sold"), 1, "{fenced}");
    assert_eq!(fenced["first"], "fenced", "{fenced}");

    let leader = row("zookeeper_leader");
    assert_eq!(int(&leader, "lock_overlaps"), 0, "{leader}");
    assert_eq!(int(&leader, "oversold"), 0, "{leader}");
    assert_eq!(int(&leader, "sold"), 1, "{leader}");
    assert_eq!(leader["first"], "deducted", "{leader}");
    assert_eq!(
        leader["second"], "lock_busy",
        "the new leader has the lock: {leader}"
    );

    let paused = row("zookeeper_paused");
    assert_eq!(int(&paused, "lock_overlaps"), 1, "{paused}");
    assert_eq!(
        int(&paused, "oversold"),
        1,
        "consensus does not fix a pause: {paused}"
    );
    assert_eq!(int(&paused, "sold"), 2, "{paused}");
    assert_eq!(paused["second"], "deducted", "the lock passed on: {paused}");

    let zk_fenced = row("zookeeper_fenced");
    assert_eq!(int(&zk_fenced, "lock_overlaps"), 1, "{zk_fenced}");
    assert_eq!(int(&zk_fenced, "oversold"), 0, "{zk_fenced}");
    assert_eq!(int(&zk_fenced, "sold"), 1, "{zk_fenced}");
    assert_eq!(zk_fenced["first"], "fenced", "{zk_fenced}");
    assert_eq!(zk_fenced["second"], "deducted", "{zk_fenced}");

    for port in lesson_ports(base) {
        assert!(
            TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "something still listens on :{port} after the lesson"
        );
    }
    let _ = std::fs::remove_dir_all(&run_dir);
}

fn run_lesson(run_dir: &Path, base: u16) -> Output {
    Command::new(root().join("scripts/failover-lesson.sh"))
        .env("RUN_DIR", run_dir)
        .env("PORT_BASE", base.to_string())
        .env("BIN", SECKILL)
        .env("SKIP_BUILD", "1")
        .output()
        .expect("scripts/failover-lesson.sh")
}

/// Whether a server of the lesson's found its port taken (every one logs under the run
/// folder).
fn port_was_taken(run_dir: &Path) -> bool {
    fn logs(dir: &Path) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .flat_map(|e| {
                let path = e.path();
                if path.is_dir() {
                    logs(&path)
                } else {
                    std::fs::read_to_string(&path).into_iter().collect()
                }
            })
            .collect()
    }
    logs(run_dir).iter().any(|log| ports::bind_failed(log))
}
