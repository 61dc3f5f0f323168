//! The state every handler shares: one instance — what its deductions reach
//! ([`Context`]), and the orders' database.

use std::ops::Deref;
use std::sync::Arc;

pub use crate::variants::{Context, Settings};

use crate::admission::Admission;
use crate::orders::OrdersDb;

/// One instance. Cheap to clone: one `Arc`.
#[derive(Clone)]
pub struct AppState(Arc<App>);

impl AppState {
    pub fn new(app: App) -> Self {
        Self(Arc::new(app))
    }
}

impl Deref for AppState {
    type Target = App;

    fn deref(&self) -> &App {
        &self.0
    }
}

/// One instance: what its deductions reach, and what only the routes use.
pub struct App {
    /// The stores, locks, settings and metrics, shared with every deduction.
    pub context: Arc<Context>,
    /// `--orders-db`: the orders' store of record, when there is one.
    pub orders: Option<Arc<OrdersDb>>,
    /// The sale's front door: waiting rooms, buyers' rate limits, sold-out flags.
    pub admission: Admission,
}

impl Deref for App {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.context
    }
}
