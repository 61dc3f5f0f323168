//! The cluster as users run it: real Redis, two instances and real Nginx with the
//! project's config. The progression holds through Nginx, Nginx keeps /admin to loopback
//! and moves POSTs past a dead instance, and the bench agrees with /stats.

mod common;

use std::process::Command;

use common::{Cluster, Nginx, int};
use serde_json::Value;

/// Through Nginx: naive loses stock; every other variant sells exactly the stock, and both
/// instances take part.
#[tokio::test]
async fn progression_through_nginx() {
    let cluster = Cluster::start(2, &[]);
    let nginx = Nginx::start(&cluster.instances);

    nginx.reset(&cluster.http, 100, 1).await;
    cluster
        .load_through(nginx.url("/deduct_stock/naive"), 400, 40, false)
        .await;
    let stats = nginx.stats(&cluster.http).await;
    assert!(
        int(&stats, "lost_updates") > 0 || int(&stats, "oversold") > 0,
        "naive through Nginx: {stats}"
    );

    for (variant, shards) in [
        ("setnx?work_ms=1", 1),
        ("token?work_ms=1&wait_ms=5000", 1),
        ("watchdog?work_ms=1", 1),
        ("segmented?work_ms=1", 4),
        ("lua", 1),
    ] {
        nginx.reset(&cluster.http, 60, shards).await;
        // setnx fails fast, so it gets rounds until the stock is gone.
        for _ in 0..40 {
            cluster
                .load_through(
                    nginx.url(&format!("/deduct_stock/{variant}")),
                    200,
                    20,
                    false,
                )
                .await;
            if int(&nginx.stats(&cluster.http).await, "remaining") == 0 {
                break;
            }
        }
        let stats = nginx.stats(&cluster.http).await;
        assert_eq!(int(&stats, "sold"), 60, "{variant}: {stats}");
        assert_eq!(int(&stats, "remaining"), 0, "{variant}: {stats}");
        assert_eq!(int(&stats, "oversold"), 0, "{variant}: {stats}");
        assert_eq!(int(&stats, "lost_updates"), 0, "{variant}: {stats}");
        assert_eq!(int(&stats, "lock_overlaps"), 0, "{variant}: {stats}");
        assert_eq!(
            stats["by_instance"].as_object().unwrap().len(),
            2,
            "{variant}: {stats}"
        );
    }
}

/// A POST deduction moves past a dead instance without an error (Nginx retries only what
/// never reached an instance), and nothing is sold twice.
#[tokio::test]
async fn post_moves_past_a_dead_instance() {
    let mut cluster = Cluster::start(2, &[]);
    let nginx = Nginx::start(&cluster.instances);
    nginx.reset(&cluster.http, 100, 1).await;
    cluster.instances[1].kill();
    let statuses = cluster
        .load_through(nginx.url("/deduct_stock/lua"), 60, 3, false)
        .await
        .statuses;
    assert_eq!(
        statuses.get(&200),
        Some(&60),
        "every POST answered by the live instance: {statuses:?}"
    );
    let stats = nginx.stats(&cluster.http).await;
    assert_eq!(int(&stats, "sold"), 60, "{stats}");
    assert_eq!(int(&stats, "remaining"), 40, "{stats}");
}

/// `seckill bench` through Nginx: its JSON agrees with the clients' counts and with /stats.
#[tokio::test]
async fn bench_agrees_with_stats() {
    let cluster = Cluster::start(2, &[]);
    let nginx = Nginx::start(&cluster.instances);
    // The bench leaves the product as it found it (here: 7 units, unsplit).
    nginx.reset(&cluster.http, 7, 1).await;
    let json_path = std::env::temp_dir().join(format!("seckill-bench-{}.json", std::process::id()));
    let chart_path = json_path.with_extension("svg");
    let output = Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(["bench", "--variants", "naive,token,segmented,lua"])
        .args([
            "--requests",
            "300",
            "--concurrency",
            "20",
            "--stock",
            "100",
            "--shards",
            "4",
        ])
        .args(["--url", &nginx.url("")])
        .args(["--redis-url", &cluster.redis.url()])
        .arg("--json")
        .arg(&json_path)
        .arg("--chart")
        .arg(&chart_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let rows = results["report"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for row in rows {
        let label = row["label"].as_str().unwrap();
        assert!(
            stdout.contains(label),
            "table has a row for {label}:\n{stdout}"
        );
        let statuses: i64 = row["statuses"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_i64().unwrap())
            .sum();
        assert_eq!(statuses, 300, "{label}: every request answered");
        let stats = &row["stats"];
        for field in [
            "sold",
            "oversold",
            "lost_updates",
            "lock_overlaps",
            "remaining",
        ] {
            assert_eq!(
                row[field], stats[field],
                "{label}: {field} is /stats' figure"
            );
        }
        assert_eq!(
            row["statuses"]["200"], stats["sold"],
            "{label}: one order per 200"
        );
        let commands = row["redis_commands_per_unit"].as_f64().unwrap();
        assert!(
            commands >= 1.0,
            "{label}: Redis did work per unit: {commands}"
        );
    }
    assert!(
        rows[0]["lost_updates"].as_i64().unwrap() > 0,
        "naive lost updates: {}",
        rows[0]
    );
    for row in &rows[1..] {
        assert_eq!(row["sold"], 100, "{}", row["label"]);
        assert_eq!(row["oversold"], 0, "{}", row["label"]);
    }
    // The product is left as the bench found it: 7 units, unsplit, no orders.
    let after = nginx.stats(&cluster.http).await;
    assert_eq!(
        (
            int(&after, "initial"),
            int(&after, "shards"),
            int(&after, "sold")
        ),
        (7, 1, 0),
        "left as found: {after}"
    );
    let chart = std::fs::read_to_string(&chart_path).unwrap();
    assert!(
        chart.starts_with("<svg") && chart.contains("segmented x4"),
        "a chart with every row"
    );
    let _ = std::fs::remove_file(json_path);
    let _ = std::fs::remove_file(chart_path);
}

/// The performance suites report their ratios, each from rows of one run: here the ceiling
/// (healthz against lua) and the shards curve, on small numbers.
#[tokio::test]
async fn bench_suites_report_ratios() {
    let cluster = Cluster::start(2, &[]);
    let nginx = Nginx::start(&cluster.instances);
    for (suite, expected) in [
        ("ceiling", "lock-free ceiling"),
        ("shards", "segmented goodput"),
        ("waiting", "watchdog waiting"),
    ] {
        let json_path =
            std::env::temp_dir().join(format!("seckill-{suite}-{}.json", std::process::id()));
        let output = Command::new(env!("CARGO_BIN_EXE_seckill"))
            .args([
                "bench",
                "--suite",
                suite,
                "--rounds",
                "1",
                "--requests",
                "400",
                "--concurrency",
                "20",
            ])
            .args(["--url", &nginx.url(""), "--redis-url", &cluster.redis.url()])
            .arg("--json")
            .arg(&json_path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{suite}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains(expected),
            "{suite} prints its ratio:\n{stdout}"
        );
        let results: Value =
            serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
        let ratios = results["report"]["ratios"].as_array().unwrap();
        let ratio = ratios
            .iter()
            .find(|r| r["name"] == expected)
            .expect("the ratio in the JSON");
        assert!(ratio["value"].as_f64().unwrap() > 0.0, "{ratio}");
        for row in results["report"]["rows"].as_array().unwrap() {
            if !row["variant"].is_null() {
                assert_eq!(row["oversold"], 0, "{suite}: {row}");
                assert_eq!(
                    row["statuses"]["200"], row["stats"]["sold"],
                    "{suite}: {}",
                    row["label"]
                );
            }
        }
        let _ = std::fs::remove_file(json_path);
    }
}
