//! The fault schedule: drawn from a seed, played against the world while the buyers click.

use std::fmt;
use std::time::Duration;

use tokio::task::block_in_place as blocking;
use tokio::time::Instant;

use crate::world::World;

/// One fault, and how long it lasts.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Redis frozen (SIGSTOP): connections stay open, nothing is answered, and what was
    /// sent before runs when it goes on (SIGCONT). A lost answer, not an undone command.
    PauseRedis(Duration),
    /// Redis killed (SIGKILL) and started again on its AOF after a while.
    KillRedis(Duration),
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
            Self::PauseRedis(d)
            | Self::KillRedis(d)
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
    /// Faults from 2 s into `load` until 3 s before its end, 1–3 s apart, drawn from `seed`.
    pub fn draw(seed: u64, load: Duration) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let ms =
            |rng: &mut fastrand::Rng, from: u64, to: u64| Duration::from_millis(rng.u64(from..=to));
        let mut faults = Vec::new();
        let mut at = Duration::from_secs(2);
        while at + Duration::from_secs(3) < load {
            let fault = match rng.u32(0..100) {
                0..30 => Fault::PauseRedis(ms(&mut rng, 1_000, 3_500)),
                30..45 => Fault::KillRedis(ms(&mut rng, 300, 1_500)),
                45..65 => Fault::KillInstance(rng.usize(0..2), ms(&mut rng, 500, 2_500)),
                65..80 => Fault::PauseInstance(rng.usize(0..2), ms(&mut rng, 1_000, 3_000)),
                _ => Fault::StopPostgres(ms(&mut rng, 1_000, 4_000)),
            };
            faults.push((at, fault));
            at += fault.lasts() + ms(&mut rng, 1_000, 3_000);
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
        Fault::PauseRedis(_) => {
            world.redis.signal("STOP");
            tokio::time::sleep(lasts).await;
            world.redis.signal("CONT");
        }
        Fault::KillRedis(_) => {
            blocking(|| world.redis.kill());
            tokio::time::sleep(lasts).await;
            blocking(|| world.redis.restart());
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
