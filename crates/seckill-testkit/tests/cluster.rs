//! The testkit's Redis Cluster, as the tests and the bench's capacity suite start it.

use seckill_testkit::RedisCluster;

/// One master alone (what the capacity suite measures a Cluster's fixed cost on) serves
/// every slot: a key of any slot is written and read on it, with no `MOVED`.
#[test]
fn a_lone_master_serves_every_slot() {
    let cluster = RedisCluster::start(1, 0);
    let port = cluster.nodes[0].port;
    let info = cluster.cli(port, &["cluster", "info"]);
    assert!(info.contains("cluster_state:ok"), "{info}");
    assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
    for key in ["a", "b", "seckill:{101}:stock", "seckill:{p9}:stock"] {
        assert_eq!(cluster.cli(port, &["set", key, "1"]).trim(), "OK", "{key}");
        assert_eq!(cluster.cli(port, &["get", key]).trim(), "1", "{key}");
    }
}
