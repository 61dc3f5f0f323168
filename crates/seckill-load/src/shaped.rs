//! A load whose requests the caller builds — any method, path, headers and body — and the
//! history of every request it sent: when, what came back, and when. `seckill-check` sends
//! a service it did not write its own requests this way.

use std::sync::Arc;
use std::time::Duration;

/// Builds request `n` of a load on the load's client.
pub type Shape = Arc<dyn Fn(&reqwest::Client, usize) -> reqwest::RequestBuilder + Send + Sync>;

/// A [`Shape`] a `Load` can print.
#[derive(Clone)]
pub(crate) struct Builder(pub(crate) Shape);

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shape")
    }
}

/// What a history keeps of an answer, given its status and its whole body (a history that
/// needs one field of a long body reads it here, before the body is cut).
pub type Keep = Arc<dyn Fn(u16, &[u8]) -> Vec<u8> + Send + Sync>;

/// A [`Keep`] a `Load` can print.
#[derive(Clone)]
pub(crate) struct Keeper(pub(crate) Keep);

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keep")
    }
}

/// How much of each answer's body a history keeps: enough for an order id, and a million
/// requests' history stays in memory even when a service answers with error pages.
pub const KEPT_BODY: usize = 2048;

/// One request of a load that keeps its history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// The request's number in its load (`0..requests`).
    pub n: usize,
    /// When it was sent, from the load's start.
    pub sent: Duration,
    /// When its answer came (or the attempt ended without one), from the load's start.
    pub done: Duration,
    /// Its status; `None` when no answer came: a refused or reset connection, or the
    /// client's timeout. Whether it did anything is unknown.
    pub status: Option<u16>,
    /// The answer's body, its first [`KEPT_BODY`] bytes (empty without one); or what the
    /// load's [`Keep`] kept of it.
    pub body: Vec<u8>,
}
