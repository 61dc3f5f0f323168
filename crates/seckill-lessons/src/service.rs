//! What the runner asks of the service it runs in: whether the instance has what a lesson
//! needs, a product reset for a phase, a sale closed, the audit's figures, an order paid.
//! The service implements [`Service`] over its own state; the lessons never name its types.

use std::future::Future;
use std::time::Duration;

use crate::lesson::{Needs, Phase};

/// The instance the lessons run in. Product ids are the page's (`[A-Za-z0-9_-]`); the
/// service parses them, and a bad one is an error like any other. Errors are what the page
/// shows, as text.
pub trait Service: Clone + Send + Sync + 'static {
    /// Whether the instance was started with what `needs` asks for.
    fn has(&self, needs: Needs) -> bool;

    /// `product` (and a cart's second product, `<product>-b`, when the phase sells one)
    /// reset on the phase's terms, traced, reopened, its front door forgotten by this
    /// instance. The error says which step failed (`reset: …`, `reopen: …`).
    fn reset(
        &self,
        phase: &Phase,
        product: &str,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// The sale of `product` closed (`/admin/close`), waiting up to 10 s for the deductions
    /// inside.
    fn close(&self, product: &str) -> impl Future<Output = Result<(), String>> + Send;

    /// The audit's figures for `product` (`/stats`).
    fn audit(&self, product: &str) -> impl Future<Output = Result<Audit, String>> + Send;

    /// `order` of `product` paid.
    fn pay(&self, product: &str, order: &str) -> impl Future<Output = Result<(), String>> + Send;

    /// How long the instances take to bring what they answered from memory (a room, a
    /// flag) to the audit.
    fn flush_every(&self) -> Duration;
}

/// The figures of a product's audit (`/stats`) a lesson's results show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Audit {
    pub sold: i64,
    pub oversold: i64,
    pub lost_updates: i64,
    pub lock_overlaps: i64,
    /// Units left while buyers were turned away.
    pub undersold: i64,
    pub remaining: i64,
    /// 409s answered from a sold-out flag (0 when the sale has no front door).
    pub flagged: i64,
}
