//! Seed 003's table, measured whole (`--suite seed003`; `scripts/seed003.sh` starts what it
//! needs and runs it).
//!
//! The seed compares lock schemes in prose — a database's unique key, ZooKeeper, Redis
//! `SETNX`, `SET NX PX` with a Lua release, Redisson — then names four conditions a
//! distributed lock must meet. Here each scheme is the variant that implements it, and
//! every cell is measured on this machine: units/s and p99 at 200 waiters on one lock with
//! no work and with `--work-ms` (the load rows, `crate::suites`), the store's CPU per unit,
//! and the four conditions ([`probes`]):
//!
//! 1. **Mutual exclusion** — overlaps the audit counted under that load.
//! 2. **No deadlock** — a holder's instance SIGKILLed while it works inside: how long
//!    until the other instance gets in (or "never" within the probe's patience).
//! 3. **Only the holder unlocks** — through the lock's own API: a client that does not
//!    hold the lock releases it; does a third then get it?
//! 4. **Fault tolerance** — the store's process paused (SIGSTOP) for two seconds under
//!    load: what the clients were answered, and what the audit says after.
//!
//! MongoDB's `findAndModify` row is not reproduced: MongoDB is not among Debian's packages.

mod probes;

use std::fmt::Write as _;

use serde::Serialize;

use crate::args::BenchArgs;
use crate::ratio::Ratio;
use crate::row::Row;
use crate::scenario::Key;
use crate::scenario::variant;

pub use probes::probe;

/// One scheme of the seed's table and the variant that implements it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Scheme {
    pub name: &'static str,
    /// Its name in the seed (Chinese).
    pub name_zh: &'static str,
    pub variant: &'static str,
    /// The store whose CPU per unit the row reports.
    pub store: &'static str,
}

/// The lock schemes, in the seed's order.
pub const SCHEMES: [Scheme; 7] = [
    Scheme {
        name: "PostgreSQL unique key",
        name_zh: "数据库唯一索引",
        variant: "pg_unique",
        store: "postgres",
    },
    Scheme {
        name: "PostgreSQL advisory lock",
        name_zh: "数据库咨询锁",
        variant: "pg_advisory",
        store: "postgres",
    },
    Scheme {
        name: "ZooKeeper",
        name_zh: "ZooKeeper 临时顺序节点",
        variant: "zookeeper",
        store: "zookeeper",
    },
    Scheme {
        name: "Redis SETNX",
        name_zh: "Redis SETNX",
        variant: "setnx",
        store: "redis",
    },
    Scheme {
        name: "Redis SET NX PX + Lua",
        name_zh: "Redis SET NX PX + Lua",
        variant: "token",
        store: "redis",
    },
    Scheme {
        name: "Redisson watchdog",
        name_zh: "Redisson 看门狗",
        variant: "watchdog",
        store: "redis",
    },
    Scheme {
        name: "Redlock",
        name_zh: "Redlock 红锁",
        variant: "redlock",
        store: "redis x3",
    },
];

/// The stock, where a class starts and where it ends up.
pub const STOCK: [Scheme; 3] = [
    Scheme {
        name: "stock row: UPDATE … WHERE stock > 0",
        name_zh: "库存行：条件 UPDATE",
        variant: "pg_update",
        store: "postgres",
    },
    Scheme {
        name: "stock row: SELECT … FOR UPDATE",
        name_zh: "库存行：SELECT … FOR UPDATE",
        variant: "pg_for_update",
        store: "postgres",
    },
    Scheme {
        name: "Redis Lua, no lock",
        name_zh: "Redis Lua 无锁",
        variant: "lua",
        store: "redis",
    },
];

/// The lock schemes this run can measure: ZooKeeper and Redlock when the bench was given
/// their servers' pids (the instances then have them too).
pub fn schemes(args: &BenchArgs) -> Vec<Scheme> {
    SCHEMES
        .into_iter()
        .filter(|s| match s.variant {
            "zookeeper" => !args.zookeeper_pids.is_empty(),
            "redlock" => !args.redlock_pids.is_empty(),
            _ => true,
        })
        .collect()
}

/// What the probes found for one variant.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Conditions {
    pub variant: String,
    /// Seconds from the holder's SIGKILL to the next holder's 200; `None`: not within the
    /// probe's patience; absent when not probed.
    pub dead_holder_s: Option<Option<f64>>,
    /// Whether a client that does not hold the lock freed it by releasing it.
    pub stranger_released: Option<bool>,
    /// The clients' answers while the store was paused, and the audit after.
    pub store_paused: Option<String>,
}

fn at<'a>(rows: &'a [Row], name: &str, work_ms: u64) -> Option<&'a Row> {
    let key = Key::Waiters {
        variant: variant(name),
        shards: 1,
        work_ms,
        extra: "",
    };
    rows.iter().find(|r| r.scenario.key == key)
}

/// The seed's table: one line per scheme, its load rows and its conditions.
pub fn render(args: &BenchArgs, rows: &[Row], conditions: &[Conditions]) -> String {
    let mut out = String::new();
    let work = args.work_ms;
    let _ = writeln!(
        out,
        "\nSeed 003's table, measured ({} waiters on one lock; units/s and p99 ms)\n",
        crate::scenario::WAITERS
    );
    let _ = writeln!(
        out,
        "{:<38} {:>14} {:>16} {:>12} {:>8} {:>16} {:>10}  store paused 2 s",
        "scheme",
        "work 0",
        format!("work {work} ms"),
        "cpu us/unit",
        "overlap",
        "dead holder",
        "stranger"
    );
    let schemes = schemes(args);
    for scheme in schemes.iter().chain(STOCK.iter()) {
        let cell = |work_ms| {
            at(rows, scheme.variant, work_ms).map_or("—".to_owned(), |r| {
                format!("{:.0} / {:.0}", r.goodput, r.p99_ms)
            })
        };
        let cpu = at(rows, scheme.variant, 0)
            .and_then(|r| r.lock_store_cpu_us_per_unit)
            .map_or("—".to_owned(), |c| {
                format!("{c:.0} {}", short(scheme.store))
            });
        let overlaps: i64 = [0, work]
            .iter()
            .filter_map(|w| at(rows, scheme.variant, *w))
            .map(|r| r.lock_overlaps)
            .sum();
        let found = conditions.iter().find(|c| c.variant == scheme.variant);
        let dead = match found.and_then(|c| c.dead_holder_s) {
            Some(Some(s)) => format!("{s:.1} s"),
            Some(None) => format!("never ({} s)", probes::PATIENCE.as_secs()),
            None => "—".into(),
        };
        let stranger = match found.and_then(|c| c.stranger_released) {
            Some(true) => "frees it",
            Some(false) => "refused",
            None => "—",
        };
        let paused = found
            .and_then(|c| c.store_paused.clone())
            .unwrap_or_else(|| "—".into());
        let _ = writeln!(
            out,
            "{:<38} {:>14} {:>16} {:>12} {:>8} {:>16} {:>10}  {paused}",
            scheme.name,
            cell(0),
            cell(work),
            cpu,
            overlaps,
            dead,
            stranger,
        );
    }
    let _ = writeln!(
        out,
        "{:<38} not reproduced here: MongoDB is not among Debian's packages",
        "MongoDB findAndModify"
    );
    out
}

fn short(store: &str) -> &str {
    match store {
        "postgres" => "pg",
        "zookeeper" => "zk",
        other => other,
    }
}

/// The two ratios the class needs: the hot row against Redis, and the seed's database
/// lock against its Redis counterpart.
pub fn ratios(args: &BenchArgs, rows: &[Row]) -> Vec<Ratio> {
    let mut ratios = Vec::new();
    let mut pair = |name: String, a: Option<&Row>, b: Option<&Row>, of: &str| {
        if let (Some(a), Some(b)) = (a, b) {
            ratios.push(Ratio {
                name,
                value: a.goodput / b.goodput,
                target: "reported".into(),
                met: None,
                of: format!(
                    "{of}: {:.0} / {:.0} units/s, p99 {:.0} / {:.0} ms",
                    a.goodput, b.goodput, a.p99_ms, b.p99_ms
                ),
            });
        }
    };
    pair(
        "pg_update / lua units/s @200".into(),
        at(rows, "pg_update", 0),
        at(rows, "lua", 0),
        "the stock in a PostgreSQL row against the stock in Redis",
    );
    for work_ms in [0, args.work_ms] {
        pair(
            format!("pg_unique / token units/s @200, work {work_ms}"),
            at(rows, "pg_unique", work_ms),
            at(rows, "token", work_ms),
            "the seed's database lock against Redis's SET NX PX",
        );
    }
    ratios
}
