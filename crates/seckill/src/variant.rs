//! The variants of `/deduct_stock` as names: what config, knobs, errors and metrics refer
//! to. The variants themselves live in [`crate::variants`], which depends on this module,
//! never the other way round.

use std::fmt;

use serde::Serialize;

/// One step of the progression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    Naive,
    Setnx,
    Token,
    Watchdog,
    Segmented,
    Shares,
    Lua,
    Redlock,
}

impl Variant {
    /// Every variant: the progression's order, then `redlock` (which needs servers of its
    /// own, `--redlock-urls`).
    pub const ALL: [Variant; 8] = [
        Self::Naive,
        Self::Setnx,
        Self::Token,
        Self::Watchdog,
        Self::Segmented,
        Self::Shares,
        Self::Lua,
        Self::Redlock,
    ];

    /// The progression on one Redis, as the bench runs it by default.
    pub const PROGRESSION: [Variant; 7] = [
        Self::Naive,
        Self::Setnx,
        Self::Token,
        Self::Watchdog,
        Self::Segmented,
        Self::Shares,
        Self::Lua,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Naive => "naive",
            Self::Setnx => "setnx",
            Self::Token => "token",
            Self::Watchdog => "watchdog",
            Self::Segmented => "segmented",
            Self::Shares => "shares",
            Self::Lua => "lua",
            Self::Redlock => "redlock",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

    /// Whether a deduction holds a lock it must give back, or a unit it must record (and
    /// so must not be cut short).
    pub fn takes_a_lock(self) -> bool {
        !matches!(self, Self::Naive | Self::Lua)
    }

    /// The knobs this variant takes besides `product`.
    pub fn knobs(self) -> &'static [&'static str] {
        match self {
            Self::Naive => &["work_ms"],
            Self::Setnx => &["work_ms", "fault", "pause_ms", "fence"],
            Self::Token => &["work_ms", "ttl_ms", "wait_ms", "fault", "pause_ms", "fence"],
            Self::Watchdog | Self::Segmented => &[
                "work_ms", "lease_ms", "wait_ms", "fault", "pause_ms", "fence", "fair", "handoff",
            ],
            Self::Shares => &["work_ms", "wait_ms", "share_units"],
            Self::Lua => &["batch"],
            Self::Redlock => &["work_ms", "ttl_ms", "wait_ms", "fault", "fence"],
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
