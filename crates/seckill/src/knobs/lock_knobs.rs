//! The knobs the lock variants share: the seeds' work inside the lock, the lock's wait, TTL
//! and lease, the faults, and fencing.

use super::{Kind, Knob};

/// `work_ms`: business time inside the critical section (the seeds widen race windows with
/// sleeps).
pub const WORK_MS: Knob = Knob {
    name: "work_ms",
    doc: "Business time inside the critical section (all but lua and pg_update).",
    kind: Kind::Millis {
        min: 0,
        max: |l| l.max_work_ms,
        default: Some(0),
    },
};

/// `wait_ms`: how long to wait for a held lock. 0 unless the variant says otherwise.
pub const WAIT_MS: Knob = Knob {
    name: "wait_ms",
    doc: "How long to wait for a held lock (token, watchdog, segmented, redlock, zookeeper, \
          pg_unique, pg_advisory; pg_for_update: the row lock), or (shares) for a unit held in \
          another instance's share.",
    kind: Kind::Millis {
        min: 0,
        max: |l| l.max_wait_ms,
        default: Some(0),
    },
};

/// How long watchdog, segmented, shares and redlock requests wait when they name no
/// `wait_ms`: users of these variants wait rather than fail.
pub const DEFAULT_LOCK_WAIT_MS: u64 = 5_000;

/// `ttl_ms`: a string lock's TTL.
pub const TTL_MS: Knob = Knob {
    name: "ttl_ms",
    doc: "The lock's TTL (token, redlock; without it redlock extends its lock by quorum \
          while the work runs).",
    kind: Kind::Millis {
        min: 10,
        max: |l| l.max_ttl_ms,
        default: None,
    },
};

/// `lease_ms`: an explicit lease for the watchdog lock, which then has no watchdog.
pub const LEASE_MS: Knob = Knob {
    name: "lease_ms",
    doc: "An explicit lease: no watchdog then (watchdog, segmented); pg_unique: the row's \
          lock_until, past which a waiter takes the row over.",
    kind: Kind::Millis {
        min: 10,
        max: |l| l.max_ttl_ms,
        default: None,
    },
};

/// `fault`: a fault to inject; only on instances started with `--faults`.
pub const FAULT: Knob = Knob {
    name: "fault",
    doc: "Fault injection, only on instances started with --faults; otherwise a 400.",
    kind: Kind::Choice {
        values: &["abandon", "pause_before_release"],
    },
};

/// `fault` on the zookeeper variant: a stop-the-world pause between the holder's last check
/// and its commit, the pause a session cannot survive and the holder cannot notice.
pub const STOP_FAULT: Knob = Knob {
    name: "fault",
    doc: "Fault injection, only on instances started with --faults; otherwise a 400.",
    kind: Kind::Choice {
        values: &["stop_before_commit"],
    },
};

/// `pause_ms`: how long `fault=pause_before_release` pauses, or `stop_before_commit` stops.
pub const PAUSE_MS: Knob = Knob {
    name: "pause_ms",
    doc: "With fault=pause_before_release or fault=stop_before_commit.",
    kind: Kind::Millis {
        min: 0,
        max: |l| l.max_pause_ms,
        default: None,
    },
};

/// `fence`: present a fencing token at the stock.
pub const FENCE: Knob = Knob {
    name: "fence",
    doc: "Lock variants: on presents a fencing token at the stock, which refuses a commit \
          from a holder older than one it has seen (503 fenced). Off by default, so that the \
          lessons fail as the seeds say.",
    kind: Kind::Switch { default: false },
};
