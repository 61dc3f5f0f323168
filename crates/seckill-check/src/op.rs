//! One buy request of a row and what came of it.

use std::time::Duration;

use crate::target::Meaning;

/// One buy request and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub phase: usize,
    /// The request's number in its phase (the phases after the file's are the settling
    /// resends).
    pub n: usize,
    /// The purchase it is one send of, in the phase that made it.
    pub purchase: usize,
    /// `u<buyer>`.
    pub buyer: usize,
    pub key: Option<String>,
    /// From the row's start.
    pub sent: Duration,
    pub done: Duration,
    pub status: Option<u16>,
    pub meaning: Meaning,
    /// The order a sale named (its answer's `buy.order`).
    pub order: Option<String>,
}
