//! What a run produced: a row per scenario, and the ratios of its suite.

use serde::Serialize;

use crate::args::Suite;
use crate::ratio::Ratio;
use crate::row::Row;

/// What a run produced: the rows, and the ratios its suite asks for.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub suite: Suite,
    pub rows: Vec<Row>,
    pub ratios: Vec<Ratio>,
    /// Peak resident memory per instance (memory suite), bytes, by instance URL.
    pub peak_rss: Vec<(String, u64)>,
    /// Seed 003's conditions, probed (seed003 suite).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::seed003::Conditions>,
    /// The front door's figures (admission suite).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission: Option<crate::admission::Figures>,
    /// The capacity model's figures (capacity suite).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<crate::capacity::Figures>,
}
