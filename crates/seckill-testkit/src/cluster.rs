//! A real Redis Cluster on loopback: masters and replicas, each a `redis-server` with
//! its own AOF, joined by `redis-cli --cluster create`, with a short node timeout so that
//! a failover takes seconds.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{RedisServer, ports, redis_cli};

/// How long a master may be unreachable before its replica takes over.
pub const NODE_TIMEOUT_MS: u64 = 2_000;

pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// `masters` masters with `replicas` replicas each, every slot served, every replica
    /// in sync with its master. One master alone (`start(1, 0)`) is given every slot by
    /// hand: `redis-cli --cluster create` wants three masters at least.
    pub fn start(masters: usize, replicas: usize) -> Self {
        let alone = masters == 1 && replicas == 0;
        let timeout = NODE_TIMEOUT_MS.to_string();
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &timeout,
            // A replica's first sync starts at once, not 5 s later.
            "--repl-diskless-sync-delay",
            "0",
        ];
        if alone {
            // A node that never met another does not know its own address.
            args.extend(["--cluster-announce-ip", "127.0.0.1"]);
        }
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| RedisServer::start_on_one_of(ports::cluster_candidate, &args))
            .collect();
        if alone {
            let added = redis_cli(nodes[0].port, &["cluster", "addslotsrange", "0", "16383"]);
            assert!(added.contains("OK"), "CLUSTER ADDSLOTSRANGE: {added}");
        } else {
            let created = Command::new("redis-cli")
                .arg("--cluster")
                .arg("create")
                .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
                .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
                .output()
                .expect("redis-cli must be installed (scripts/test.sh installs it)");
            assert!(
                created.status.success(),
                "redis-cli --cluster create: {}",
                String::from_utf8_lossy(&created.stdout)
            );
        }
        let cluster = Self { nodes };
        cluster.wait_until_settled(masters * (1 + replicas), masters);
        cluster
    }

    /// The list of initial nodes an instance takes with `--redis-mode cluster`.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(RedisServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A client of the whole Cluster, to look at what the service left in it.
    pub async fn conn(&self) -> redis::cluster_async::ClusterConnection {
        redis::cluster::ClusterClient::new(
            self.nodes.iter().map(RedisServer::url).collect::<Vec<_>>(),
        )
        .unwrap()
        .get_async_connection()
        .await
        .expect("a connection to the test cluster")
    }

    /// `redis-cli` against one live node.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        redis_cli(port, args)
    }

    /// `CLUSTER NODES` as seen by a live node: id -> (port, flags, master id, slots).
    fn topology(&self) -> Vec<Node> {
        let live = self
            .nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a live node");
        self.cli(live.port, &["cluster", "nodes"])
            .lines()
            .filter_map(Node::parse)
            .collect()
    }

    /// Port of the master serving `slot`, as the Cluster sees it now.
    pub fn master_port_of_slot(&self, slot: u16) -> Option<u16> {
        self.topology()
            .into_iter()
            .find(|n| n.is_master() && n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .map(|n| n.port)
    }

    /// Ports of the masters that serve slots, by port.
    pub fn master_ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .topology()
            .into_iter()
            .filter(|n| n.is_master() && !n.slots.is_empty())
            .map(|n| n.port)
            .collect();
        ports.sort_unstable();
        ports
    }

    /// The port of a replica of the master on `port` (the first it lists in `INFO
    /// replication`).
    pub fn replica_of(&self, port: u16) -> u16 {
        let info = self.cli(port, &["info", "replication"]);
        info.lines()
            .filter_map(|line| line.trim().strip_prefix("slave0:"))
            .find_map(|fields| {
                let port = fields.split(',').find_map(|f| f.strip_prefix("port="))?;
                port.parse().ok()
            })
            .unwrap_or_else(|| panic!(":{port} has no replica: {info}"))
    }

    /// Sends `signal` to the node on `port`: `STOP` freezes it, `CONT` lets it go on.
    pub fn signal(&self, port: u16, signal: &str) {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node on that port")
            .signal(signal);
    }

    /// SIGKILL of the node on `port`.
    pub fn kill(&mut self, port: u16) {
        self.node(port).kill();
    }

    /// Starts the node on `port` again, on its AOF and `nodes.conf`: it rejoins the
    /// Cluster (a master that was failed over comes back as a replica).
    pub fn restart(&mut self, port: u16) {
        self.node(port).restart();
    }

    /// Waits until the node on `port` is a replica in sync with its master.
    pub fn wait_replica_synced(&self, port: u16, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let info = self.cli(port, &["info", "replication"]);
            if info.contains("role:slave")
                && info.contains("master_link_status:up")
                && info.contains("master_sync_in_progress:0")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                ":{port} did not rejoin as a replica: {info}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node on that port")
    }

    /// Waits until every slot is served by a live master and the Cluster says ok, as seen
    /// by every live node.
    pub fn wait_for_failover(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let live: Vec<u16> = self
                .nodes
                .iter()
                .filter(|n| n.is_running())
                .map(|n| n.port)
                .collect();
            let ok = live.iter().all(|&p| {
                self.cli(p, &["cluster", "info"])
                    .contains("cluster_state:ok")
            });
            let masters_live = self
                .topology()
                .iter()
                .filter(|n| n.is_master() && !n.slots.is_empty())
                .all(|n| live.contains(&n.port) && !n.flags.contains("fail"));
            if ok && masters_live {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not fail over in {within:?}: {:?}",
                self.topology()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every node agrees the Cluster is ok, there are `masters` masters with slots, and
    /// every replica has finished its first sync.
    fn wait_until_settled(&self, nodes: usize, masters: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self.nodes.iter().all(|n| {
                self.cli(n.port, &["cluster", "info"])
                    .contains("cluster_state:ok")
            });
            let topology = self.topology();
            let known = topology.len() == nodes;
            let serving = topology
                .iter()
                .filter(|n| n.is_master() && !n.slots.is_empty())
                .count()
                == masters;
            let replicas: Vec<&Node> = topology.iter().filter(|n| !n.is_master()).collect();
            let synced = replicas.len() == nodes - masters
                && replicas.iter().all(|n| {
                    let info = self.cli(n.port, &["info", "replication"]);
                    info.contains("master_link_status:up")
                        && info.contains("master_sync_in_progress:0")
                });
            if ok && known && serving && synced {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not settle: {topology:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every replica of the master on `port` has acknowledged everything the
    /// master has written (so that killing it now loses nothing).
    pub fn wait_replicas_caught_up(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info = self.cli(port, &["info", "replication"]);
            let fields: BTreeMap<&str, &str> = info
                .lines()
                .filter_map(|l| l.trim().split_once(':'))
                .collect();
            let offset = fields.get("master_repl_offset").copied().unwrap_or("x");
            let caught_up = fields
                .iter()
                .filter(|(k, _)| {
                    k.starts_with("slave") && k[5..].chars().all(|c| c.is_ascii_digit())
                })
                .all(|(_, v)| {
                    v.contains(&format!("offset={offset},")) && v.contains("state=online")
                });
            if caught_up {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "replicas of :{port} did not catch up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[derive(Debug)]
struct Node {
    port: u16,
    flags: String,
    slots: Vec<(u16, u16)>,
}

impl Node {
    /// One line of `CLUSTER NODES`: `id ip:port@bus flags master ping pong epoch state slots…`.
    fn parse(line: &str) -> Option<Self> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let port = fields
            .get(1)?
            .split('@')
            .next()?
            .rsplit(':')
            .next()?
            .parse()
            .ok()?;
        let slots = fields
            .iter()
            .skip(8)
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| match s.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => s.parse().ok().map(|x| (x, x)),
            })
            .collect();
        Some(Self {
            port,
            flags: fields.get(2)?.to_string(),
            slots,
        })
    }

    fn is_master(&self) -> bool {
        self.flags.contains("master")
    }
}
