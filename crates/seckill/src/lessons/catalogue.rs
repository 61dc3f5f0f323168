//! The lessons, each defined once: the page starts them, and `seckill-bench --lessons`
//! adds the failure modes among them to its table as rows.

use serde::Serialize;

use crate::variants::{Variant, lua, naive, segmented, setnx, token, watchdog};

/// A lesson: a title, what to watch for, and its phases.
#[derive(Debug, Clone, Serialize)]
pub struct Lesson {
    pub name: &'static str,
    pub title: &'static str,
    /// What to watch for, and why it happens.
    pub watch: &'static str,
    pub phases: &'static [Phase],
    /// Needs instances started with `--faults`.
    pub needs_faults: bool,
    /// One of the progression's failure modes (or its cure on the same terms), which the
    /// bench's `--lessons` adds to the progression as a row.
    pub failure_mode: bool,
}

/// One phase of a lesson: a reset, an optional first request (a fault), then the load.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// The phase, in a few words: the bench's row label.
    pub label: &'static str,
    pub stock: i64,
    pub shards: u32,
    pub variant: Variant,
    /// The load's knobs, as a query string.
    pub knobs: &'static str,
    /// Knobs of a request sent alone before the load (a fault), as a query string.
    pub first: Option<&'static str>,
    pub requests: usize,
    pub concurrency: usize,
}

impl Phase {
    /// `variant?knobs`, as a deduction's path ends.
    pub fn path(&self) -> String {
        with_knobs(self.variant, self.knobs)
    }

    /// The first request's `variant?knobs`, when the phase has one.
    pub fn first_path(&self) -> Option<String> {
        self.first.map(|knobs| with_knobs(self.variant, knobs))
    }
}

fn with_knobs(variant: Variant, knobs: &str) -> String {
    if knobs.is_empty() {
        variant.to_string()
    } else {
        format!("{variant}?{knobs}")
    }
}

const fn phase(
    label: &'static str,
    stock: i64,
    shards: u32,
    variant: Variant,
    knobs: &'static str,
    requests: usize,
    concurrency: usize,
) -> Phase {
    Phase {
        label,
        stock,
        shards,
        variant,
        knobs,
        first: None,
        requests,
        concurrency,
    }
}

const NAIVE: Variant = Variant::of(&naive::SPEC);
const SETNX: Variant = Variant::of(&setnx::SPEC);
const TOKEN: Variant = Variant::of(&token::SPEC);
const WATCHDOG: Variant = Variant::of(&watchdog::SPEC);
const SEGMENTED: Variant = Variant::of(&segmented::SPEC);
const LUA: Variant = Variant::of(&lua::SPEC);

/// The failure lessons' long work and short TTL: the work outlasts the lock. Instances
/// for the watchdog lesson run with `--lock-lease-ms` equal to [`SHORT_TTL_MS`], so that
/// the watchdog lesson runs on the token lesson's terms.
pub const LONG_WORK_MS: u64 = 300;
pub const SHORT_TTL_MS: u64 = 200;

/// The lessons, in the progression's order.
pub const LESSONS: &[Lesson] = &[
    Lesson {
        name: "naive",
        title: "naive: GET, then SET, from two instances",
        watch: "Watch sold run past the stock and oversold and lost updates climb. Two instances \
                read the same stock, each writes stock-1 back, and one sale vanishes from the \
                stock: a lost update. Every request is answered 200, so the stock runs out on \
                paper long after it ran out for real.",
        phases: &[phase("naive", 500, 1, NAIVE, "work_ms=2", 2_000, 100)],
        needs_faults: false,
        failure_mode: false,
    },
    Lesson {
        name: "setnx",
        title: "setnx: a holder dies with the lock",
        watch: "The first buyer takes the SETNX lock and dies before its DEL. The lock has no \
                TTL: it shows held, never expires, and every later buyer is 429 lock busy. \
                Nothing sells until an operator deletes the lock. A lock needs a TTL.",
        phases: &[Phase {
            first: Some("fault=abandon"),
            ..phase("setnx, holder died", 10, 1, SETNX, "", 40, 10)
        }],
        needs_faults: true,
        failure_mode: true,
    },
    Lesson {
        name: "token",
        title: "token: the work outlasts the TTL",
        watch: "Each holder works 300 ms under a 200 ms TTL. The lock expires under its holder, \
                the next buyer gets in while the first is still inside: overlaps climb, and with \
                10 units a unit can sell twice. The token only keeps a holder from deleting \
                someone else's lock; it does not keep the lock.",
        phases: &[phase(
            "token, work 300 > ttl 200",
            10,
            1,
            TOKEN,
            "work_ms=300&ttl_ms=200&wait_ms=5000",
            40,
            10,
        )],
        needs_faults: false,
        failure_mode: true,
    },
    Lesson {
        name: "watchdog",
        title: "watchdog: the same work, a lease that is renewed",
        watch: "The same 300 ms of work. Watch the lock's TTL count down and jump back up: the \
                watchdog renews the lease every third of it while the holder works. No overlap, \
                exactly the stock sold, one holder at a time.",
        phases: &[phase(
            "watchdog, work 300 > lease",
            10,
            1,
            WATCHDOG,
            "work_ms=300&wait_ms=5000",
            40,
            10,
        )],
        needs_faults: false,
        failure_mode: true,
    },
    Lesson {
        name: "segmented",
        title: "segmented x8 against one lock",
        watch: "First one watchdog lock for the whole stock, then the same stock split into 8 \
                shards with a lock each. Watch the goodput line: eight holders work at once, so \
                the split stock sells several times faster, and the shard bars drain together.",
        phases: &[
            phase(
                "watchdog",
                500,
                1,
                WATCHDOG,
                "work_ms=2&wait_ms=5000",
                1_000,
                100,
            ),
            phase(
                "segmented x8",
                500,
                8,
                SEGMENTED,
                "work_ms=2&wait_ms=5000",
                1_000,
                100,
            ),
        ],
        needs_faults: false,
        failure_mode: false,
    },
    Lesson {
        name: "lua",
        title: "lua: no lock at all",
        watch: "One script checks, takes a unit and records the order atomically inside Redis: \
                no lock, nothing to wait for. Exactly the stock sold, the fastest line on the \
                chart: the ceiling every lock is measured against.",
        phases: &[phase("lua", 500, 1, LUA, "", 2_000, 100)],
        needs_faults: false,
        failure_mode: false,
    },
];

pub fn find(name: &str) -> Option<&'static Lesson> {
    LESSONS.iter().find(|l| l.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lesson_is_bounded_and_found_by_name() {
        for lesson in LESSONS {
            assert_eq!(find(lesson.name).map(|l| l.name), Some(lesson.name));
            for phase in lesson.phases {
                assert!(
                    phase.requests <= 2_000 && phase.concurrency <= 100,
                    "{}",
                    lesson.name
                );
                assert_eq!(phase.shards > 1, phase.variant.spec().splits_stock);
            }
        }
        assert!(find("nope").is_none());
        let work = format!("work_ms={LONG_WORK_MS}&ttl_ms={SHORT_TTL_MS}");
        assert!(find("token").unwrap().phases[0].knobs.starts_with(&work));
    }
}
