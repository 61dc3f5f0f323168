//! What each part of a sale spent on a load, from `/proc`: the CPU time (user + sys) of
//! the load generator (this process alone: its children are the parts), Nginx (its master
//! and workers), the instances, the redis-servers and PostgreSQL (its postmaster and
//! every backend), and the machine's own count of busy and idle time — read before a load
//! and after it. The capacity suite gives the pids ([`Pids`]), since it starts the parts.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;

use crate::lock_store::{TICKS_PER_SECOND, parent, ticks_of};

/// A figure for each part a sale goes through: CPU seconds a load cost, or µs per unit.
/// `postgres` is `None` when there was no database to measure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PerPart {
    /// The load generator: the bench itself (in a real sale, the buyers' own machines).
    pub load: f64,
    pub nginx: f64,
    pub instances: f64,
    pub redis: f64,
    pub postgres: Option<f64>,
}

impl PerPart {
    /// Every part together.
    pub fn total(&self) -> f64 {
        self.load + self.nginx + self.instances + self.redis + self.postgres.unwrap_or(0.0)
    }

    /// Each figure times `factor` (seconds a load cost into µs per unit: 1e6 ÷ units).
    pub fn scaled(&self, factor: f64) -> Self {
        Self {
            load: self.load * factor,
            nginx: self.nginx * factor,
            instances: self.instances * factor,
            redis: self.redis * factor,
            postgres: self.postgres.map(|p| p * factor),
        }
    }

    /// Each part's median over `all` (rounds of one row); `postgres` only when every
    /// round has it.
    pub fn median(all: &[PerPart]) -> Self {
        let of = |f: fn(&PerPart) -> f64| median(all.iter().map(f).collect());
        let postgres: Option<Vec<f64>> = all.iter().map(|p| p.postgres).collect();
        Self {
            load: of(|p| p.load),
            nginx: of(|p| p.nginx),
            instances: of(|p| p.instances),
            redis: of(|p| p.redis),
            postgres: postgres.filter(|p| !p.is_empty()).map(median),
        }
    }
}

/// The median of `values` (NaN for none).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The processes of each part of one setup.
#[derive(Debug, Clone, Default)]
pub struct Pids {
    /// Nginx's masters; their workers are counted as their children.
    pub nginx: Vec<u32>,
    pub instances: Vec<u32>,
    pub redis: Vec<u32>,
    /// The postmaster; its backends are counted as its children.
    pub postgres: Option<u32>,
}

/// Every process's parent and CPU ticks (its own, and its reaped children's), from one
/// pass over `/proc`.
struct Processes(HashMap<u32, (Option<u32>, u64)>);

impl Processes {
    fn read() -> anyhow::Result<Self> {
        let mut all = HashMap::new();
        for entry in std::fs::read_dir("/proc")
            .context("reading /proc")?
            .flatten()
        {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            // A process may end between the listing and the read.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            all.insert(pid, (parent(&stat), ticks_of(&stat).unwrap_or(0)));
        }
        Ok(Self(all))
    }

    /// The ticks of `pids` alone.
    fn own(&self, pids: &[u32]) -> u64 {
        pids.iter()
            .filter_map(|pid| self.0.get(pid))
            .map(|p| p.1)
            .sum()
    }

    /// The ticks of `pids` and of their living children.
    fn with_children(&self, pids: &[u32]) -> u64 {
        let children: u64 = self
            .0
            .values()
            .filter(|(ppid, _)| ppid.is_some_and(|p| pids.contains(&p)))
            .map(|p| p.1)
            .sum();
        self.own(pids) + children
    }
}

/// The machine's busy and all ticks, over every core, from `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Machine {
    busy: u64,
    all: u64,
}

impl Machine {
    fn read() -> anyhow::Result<Self> {
        let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        Self::parse(&stat).context("parsing /proc/stat")
    }

    /// The first line, `cpu user nice system idle iowait irq softirq steal …`: idle and
    /// iowait are idle, the rest busy (guest time is inside user already).
    fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|t| t.parse().ok())
            .collect::<Option<_>>()?;
        let &[user, nice, system, idle, iowait, irq, softirq, steal] = ticks.as_slice() else {
            return None;
        };
        let busy = user + nice + system + irq + softirq + steal;
        Some(Self {
            busy,
            all: busy + idle + iowait,
        })
    }
}

/// Each part's CPU ticks and the machine's, at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    parts: [u64; 5],
    has_postgres: bool,
    machine: Machine,
    at: Instant,
}

/// What a load cost between two readings, in CPU seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spent {
    pub parts: PerPart,
    /// What the machine spent on processes that are no part of the sale (another user's).
    pub others: f64,
    /// What it left idle.
    pub idle: f64,
    /// Seconds between the readings.
    pub wall: f64,
}

impl Reading {
    pub fn now(pids: &Pids) -> anyhow::Result<Self> {
        let machine = Machine::read()?;
        let all = Processes::read()?;
        let postgres = pids.postgres.map(|pid| all.with_children(&[pid]));
        Ok(Self {
            parts: [
                all.own(&[std::process::id()]),
                all.with_children(&pids.nginx),
                all.own(&pids.instances),
                all.own(&pids.redis),
                postgres.unwrap_or(0),
            ],
            has_postgres: postgres.is_some(),
            machine,
            at: Instant::now(),
        })
    }

    /// What was spent from `before` to this reading.
    pub fn since(&self, before: &Reading) -> Spent {
        let seconds = |i: usize| self.parts[i].saturating_sub(before.parts[i]) as f64;
        let parts = PerPart {
            load: seconds(0),
            nginx: seconds(1),
            instances: seconds(2),
            redis: seconds(3),
            postgres: self.has_postgres.then(|| seconds(4)),
        }
        .scaled(1.0 / TICKS_PER_SECOND);
        let busy = self.machine.busy.saturating_sub(before.machine.busy) as f64;
        let all = self.machine.all.saturating_sub(before.machine.all) as f64;
        Spent {
            others: (busy / TICKS_PER_SECOND - parts.total()).max(0.0),
            idle: (all - busy) / TICKS_PER_SECOND,
            parts,
            wall: self.at.duration_since(before.at).as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_machine_line() {
        let stat = "cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\n";
        assert_eq!(
            Machine::parse(stat),
            Some(Machine {
                busy: 161,
                all: 1181
            })
        );
        assert_eq!(Machine::parse("cpu0 1 2 3\n"), None);
        assert!(Machine::read().unwrap().all > 0);
    }

    /// Two readings of this process: the load part is its own time, and the parts with no
    /// processes spent nothing.
    #[test]
    fn readings_subtract_into_seconds() {
        let pids = Pids::default();
        let before = Reading::now(&pids).unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        let spent = Reading::now(&pids).unwrap().since(&before);
        assert!(spent.parts.load >= 0.0 && spent.idle >= 0.0 && spent.others >= 0.0);
        assert_eq!((spent.parts.nginx, spent.parts.redis), (0.0, 0.0));
        assert_eq!(spent.parts.postgres, None);
    }
}
