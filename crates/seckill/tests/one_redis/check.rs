//! `seckill-check` against seckill's own variants through Nginx, described by the file the
//! repository ships (`check/seckill.toml`, its base pointed at this test's Nginx): the
//! verdicts the bench gives, from nothing but HTTP and the service's own audit.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use seckill_check::{run, target::Target, verdict};
use seckill_testkit::{Nginx, heavy_turn, root};

use crate::service;

/// naive oversold and lost updates, setnx undersold, token past its TTL overlapping, and
/// watchdog and lua exact — each row a verdict of the checker, not of this test.
#[tokio::test]
async fn seckill_check_gives_the_benchs_verdicts_on_the_variants() {
    let _turn = heavy_turn().await;
    let cluster = service(2, &[]);
    let nginx = Nginx::start(&cluster.instances);
    let text = std::fs::read_to_string(root().join("check/seckill.toml")).unwrap();
    let text = text.replace("http://127.0.0.1:8080", &nginx.url(""));
    let target = Target::parse(&text).expect("check/seckill.toml is a valid target file");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(target.timeout_ms))
        .no_proxy()
        .build()
        .unwrap();
    let mut rules: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut rows = Vec::new();
    for (name, value) in &target.variants {
        let row = run::row(
            &target,
            Some((name, value)),
            &http,
            &run::never_interrupted(),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let judged = verdict::judge(&row);
        rules.insert(name, judged.findings.iter().map(|f| f.rule).collect());
        rows.push((row, judged));
    }
    let table = seckill_check::report::render(&rows);
    eprintln!("{table}");
    let broke = |name: &str, rule: &str| rules[name].contains(rule);
    assert!(
        broke("naive", "oversold") && broke("naive", "lost updates"),
        "naive: {table}"
    );
    assert!(broke("setnx", "undersold"), "setnx: {table}");
    assert!(
        broke("token_past_ttl", "own audit"),
        "token past its TTL: two holders inside at once: {table}"
    );
    for exact in ["watchdog", "lua"] {
        let row = rows
            .iter()
            .find(|(row, _)| row.label.ends_with(exact))
            .unwrap();
        assert_eq!(
            row.1.conclusion(),
            verdict::Conclusion::Pass,
            "{exact} is exact: {table}"
        );
    }
}
