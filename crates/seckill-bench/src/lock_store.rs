//! What a lock store of its own spent on a load — the ZooKeeper ensemble's JVMs, Redlock's
//! servers — as the CPU time (user + sys) the kernel counts for their processes, read from
//! `/proc/<pid>/stat` before and after a row. (The stock store's CPU comes from its `INFO`,
//! [`crate::redis_usage`]; a lock that lives in the stock store is counted there.)

use anyhow::Context;

/// Clock ticks per second in `/proc/<pid>/stat` (`USER_HZ`): 100 on every Linux the
/// project runs on.
const TICKS_PER_SECOND: f64 = 100.0;

/// The CPU seconds the processes `pids` have used so far, all their threads together.
pub fn cpu_seconds(pids: &[u32]) -> anyhow::Result<f64> {
    let mut ticks = 0u64;
    for pid in pids {
        let path = format!("/proc/{pid}/stat");
        let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        ticks += user_and_system_ticks(&stat).with_context(|| format!("parsing {path}"))?;
    }
    Ok(ticks as f64 / TICKS_PER_SECOND)
}

/// utime + stime, the 14th and 15th fields; the command name (2nd, in parentheses) may hold
/// spaces, so fields are counted after its closing parenthesis.
fn user_and_system_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_user_and_system_time_after_the_name() {
        let stat = "4242 (java main) S 1 4242 4242 0 -1 4194560 5000 0 0 0 731 42 0 0 20 0 40 0";
        assert_eq!(user_and_system_ticks(stat), Some(773));
        assert!(cpu_seconds(&[std::process::id()]).unwrap() >= 0.0);
    }
}
