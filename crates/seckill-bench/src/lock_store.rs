//! What a lock store of its own spent on a load — the ZooKeeper ensemble's JVMs, Redlock's
//! servers, PostgreSQL's postmaster and backends — as the CPU time (user + sys) the kernel
//! counts for their processes and children, read from `/proc/<pid>/stat` before and after
//! a row. (The stock store's CPU comes from its `INFO`,
//! [`crate::redis_usage`]; a lock that lives in the stock store is counted there.)

use anyhow::Context;
use seckill::variants::Variant;

use crate::args::BenchArgs;
use crate::args::Suite;

/// Clock ticks per second in `/proc/<pid>/stat` (`USER_HZ`): 100 on every Linux the
/// project runs on.
pub(crate) const TICKS_PER_SECOND: f64 = 100.0;

/// The CPU seconds the processes `pids` have used so far, all their threads together —
/// and their children's, living (PostgreSQL's backends, one per connection) and reaped.
pub fn cpu_seconds(pids: &[u32]) -> anyhow::Result<f64> {
    let mut ticks = 0u64;
    for pid in pids {
        let path = format!("/proc/{pid}/stat");
        let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        ticks += ticks_of(&stat).with_context(|| format!("parsing {path}"))?;
    }
    // The children's: every process whose parent is one of `pids`.
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if parent(&stat).is_some_and(|ppid| pids.contains(&ppid)) {
            ticks += ticks_of(&stat).unwrap_or(0);
        }
    }
    Ok(ticks as f64 / TICKS_PER_SECOND)
}

/// The processes whose parent is `pid` (PostgreSQL's backends and workers, under its
/// postmaster).
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let child: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            (parent(&stat) == Some(pid)).then_some(child)
        })
        .collect()
}

/// The fields after the command name (2nd, in parentheses, which may hold spaces).
fn fields(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace())
}

/// The parent's pid, the 4th field.
pub(crate) fn parent(stat: &str) -> Option<u32> {
    fields(stat)?.nth(1)?.parse().ok()
}

/// utime + stime + cutime + cstime, the 14th to 17th fields: the process's own CPU and
/// that of its children it has reaped.
pub(crate) fn ticks_of(stat: &str) -> Option<u64> {
    let mut fields = fields(stat)?.skip(11);
    let mut ticks = 0u64;
    for _ in 0..4 {
        let value: i64 = fields.next()?.parse().ok()?;
        ticks += u64::try_from(value).unwrap_or(0);
    }
    Some(ticks)
}

/// The stores and seed003 suites: the processes of the store `variant` keeps its locks
/// (or its stock) in, when it has servers of its own and the bench was given their pids.
pub fn lock_store_pids(args: &BenchArgs, variant: Variant) -> Option<&[u32]> {
    if !matches!(args.suite, Suite::Stores | Suite::Seed003) {
        return None;
    }
    let pids = match variant.name() {
        "zookeeper" => &args.zookeeper_pids,
        "redlock" => &args.redlock_pids,
        name if name.starts_with("pg_") => {
            return args.postgres_pid.as_ref().map(std::slice::from_ref);
        }
        _ => return None,
    };
    (!pids.is_empty()).then_some(pids.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_and_children_time_after_the_name() {
        let stat = "4242 (java main) S 1 4242 4242 0 -1 4194560 5000 0 0 0 731 42 5 2 20 0 40 0";
        assert_eq!(ticks_of(stat), Some(780));
        assert_eq!(parent(stat), Some(1));
        assert!(cpu_seconds(&[std::process::id()]).unwrap() >= 0.0);
    }
}
