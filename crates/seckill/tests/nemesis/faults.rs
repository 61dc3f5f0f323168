//! The fault schedule: drawn from a seed, played against the world while the buyers click.

use std::fmt;
use std::time::Duration;

use seckill_testkit::RedisServer;
use tokio::task::block_in_place as blocking;
use tokio::time::Instant;

use crate::world::{Stock, Topology, World};

/// How long a Cluster may take to promote a replica and take its old master back as a
/// replica of it.
const FAILOVER_WITHIN: Duration = Duration::from_secs(20);

/// One fault, and how long it lasts. A Redis fault's number picks, on a Cluster, one of
/// the masters serving slots when it strikes (0 on one Redis).
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Redis frozen (SIGSTOP): connections stay open, nothing is answered, and what was
    /// sent before runs when it goes on (SIGCONT). A lost answer, not an undone command.
    PauseRedis(usize, Duration),
    /// Redis killed (SIGKILL) and started again on its AOF after a while.
    KillRedis(usize, Duration),
    /// A Cluster's master killed and left dead until its replica has taken over; then
    /// started again, as a replica of its replacement. (Its duration is the schedule's
    /// guess at how long that takes.)
    FailOver(usize),
    /// An instance killed (SIGKILL) mid-request and started again on its address.
    KillInstance(usize, Duration),
    /// An instance frozen (SIGSTOP): a paused holder, as a long GC pause makes one.
    PauseInstance(usize, Duration),
    /// PostgreSQL stopped (a fast shutdown) and started again.
    StopPostgres(Duration),
}

impl Fault {
    fn lasts(self) -> Duration {
        match self {
            Self::FailOver(_) => Duration::from_secs(5),
            Self::PauseRedis(_, d)
            | Self::KillRedis(_, d)
            | Self::KillInstance(_, d)
            | Self::PauseInstance(_, d)
            | Self::StopPostgres(d) => d,
        }
    }
}

/// Faults one after another, each at its time from the start of the load.
pub struct Schedule {
    faults: Vec<(Duration, Fault)>,
    load: Duration,
}

impl Schedule {
    /// Faults from 2 s into `load` until 3 s before its end, 1–3 s apart (0.5–2 s on a
    /// Cluster), drawn from `seed`. On one Redis the draw is what it always was: a seed
    /// draws the same faults again.
    pub fn draw(seed: u64, load: Duration, topology: Topology) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let ms =
            |rng: &mut fastrand::Rng, from: u64, to: u64| Duration::from_millis(rng.u64(from..=to));
        // Out of 100 draws, up to which each kind of fault is drawn: on a Cluster, more of
        // them, and closer together, kill a master (a sale whose answer a kill cuts off is
        // what is hunted there, and it takes a kill within the millisecond of its fsync).
        let (masters, replicas, longest_pause, upto, gap) = match topology {
            Topology::OneRedis => (1, 0, 3_500, [30, 45, 65, 80], (1_000, 3_000)),
            Topology::Cluster { replicas } => (3, replicas, 3_000, [20, 60, 72, 86], (500, 2_000)),
        };
        let master = |rng: &mut fastrand::Rng| {
            if masters > 1 {
                rng.usize(0..masters)
            } else {
                0
            }
        };
        let mut faults = Vec::new();
        let mut at = Duration::from_secs(2);
        while at + Duration::from_secs(3) < load {
            let draw = rng.u32(0..100);
            let fault = if draw < upto[0] {
                Fault::PauseRedis(master(&mut rng), ms(&mut rng, 1_000, longest_pause))
            } else if draw < upto[1] && replicas > 0 {
                Fault::FailOver(master(&mut rng))
            } else if draw < upto[1] {
                Fault::KillRedis(master(&mut rng), ms(&mut rng, 300, 1_500))
            } else if draw < upto[2] {
                Fault::KillInstance(rng.usize(0..2), ms(&mut rng, 500, 2_500))
            } else if draw < upto[3] {
                Fault::PauseInstance(rng.usize(0..2), ms(&mut rng, 1_000, 3_000))
            } else {
                Fault::StopPostgres(ms(&mut rng, 1_000, 4_000))
            };
            faults.push((at, fault));
            at += fault.lasts() + ms(&mut rng, gap.0, gap.1);
        }
        Self { faults, load }
    }

    /// Plays every fault at its time, each undone when it has lasted; returns at the end
    /// of the load, with everything running again.
    pub async fn play(&self, world: &mut World) {
        let start = Instant::now();
        for &(at, fault) in &self.faults {
            tokio::time::sleep_until(start + at).await;
            eprintln!("{:>6.1} s  {fault:?}", start.elapsed().as_secs_f64());
            apply(world, fault).await;
        }
        tokio::time::sleep_until(start + self.load).await;
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "fault schedule ({} faults):", self.faults.len())?;
        for (at, fault) in &self.faults {
            writeln!(f, "  at {:>5.1} s  {fault:?}", at.as_secs_f64())?;
        }
        Ok(())
    }
}

/// `fault`, for as long as it lasts, then undone. (Starting and stopping servers blocks:
/// the buyers go on on the runtime's other thread meanwhile.)
async fn apply(world: &mut World, fault: Fault) {
    let lasts = fault.lasts();
    match fault {
        Fault::PauseRedis(n, _) => {
            let redis = blocking(|| redis_node(&mut world.stock, n));
            eprintln!("         (:{})", redis.port);
            redis.signal("STOP");
            tokio::time::sleep(lasts).await;
            redis.signal("CONT");
        }
        Fault::KillRedis(n, _) => {
            let redis = blocking(|| redis_node(&mut world.stock, n));
            eprintln!("         (:{})", redis.port);
            blocking(|| redis.kill());
            tokio::time::sleep(lasts).await;
            blocking(|| redis.restart());
        }
        Fault::FailOver(n) => {
            let Stock::Cluster(cluster) = &mut world.stock else {
                unreachable!("a failover is drawn for a Cluster with replicas only")
            };
            blocking(|| {
                let masters = cluster.master_ports();
                let port = masters[n % masters.len()];
                eprintln!("         (:{port})");
                cluster.kill(port);
                cluster.wait_for_failover(FAILOVER_WITHIN);
                cluster.restart(port);
                cluster.wait_replica_synced(port, FAILOVER_WITHIN);
            });
        }
        Fault::KillInstance(i, _) => {
            blocking(|| world.instances[i].kill());
            tokio::time::sleep(lasts).await;
            blocking(|| world.instances[i].restart());
        }
        Fault::PauseInstance(i, _) => {
            world.instances[i].signal("STOP");
            tokio::time::sleep(lasts).await;
            world.instances[i].signal("CONT");
        }
        Fault::StopPostgres(_) => {
            blocking(|| world.postgres.stop());
            tokio::time::sleep(lasts).await;
            blocking(|| world.postgres.restart());
        }
    }
}

/// The one Redis, or the Cluster's `n`th master (by port) of those serving slots now.
fn redis_node(stock: &mut Stock, n: usize) -> &mut RedisServer {
    match stock {
        Stock::One(redis) => redis,
        Stock::Cluster(cluster) => {
            let masters = cluster.master_ports();
            let port = masters[n % masters.len()];
            cluster
                .nodes
                .iter_mut()
                .find(|node| node.port == port)
                .expect("the master's node")
        }
    }
}
