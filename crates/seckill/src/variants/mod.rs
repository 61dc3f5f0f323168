//! The variants of `/deduct_stock`: one file each, all the same shape, and the registry
//! that everything else reads them from.
//!
//! Each file declares a [`Spec`] — its name, a line of summary, its colour on the page and
//! in the bench's chart, the knobs it takes, where it stands in the progression — and its
//! `deduct`. A lock variant builds its lock (from `seckill-lock`) and hands it to
//! `section::under_lock`, the one lock sequence every lock variant shares: take the
//! lock and enter, check the stock, work, commit, give the lock back — by the shared trips
//! (`FourTrips`: acquire, confirm, (abandon), fence, enter, commit, release) or the watchdog's two. The router, the knob parser,
//! `/openapi.json`, `/variants` (the page's colours and labels), the metrics and the bench
//! all read [`VARIANTS`]; nothing else names a variant.
//!
//! # Adding a variant
//!
//! 1. A file here, `<name>.rs`, with `pub static SPEC: Spec` and its `deduct(&Deduction)`.
//!    A knob only it takes is a `pub const` [`Knob`] in the same file, listed in
//!    `SPEC.knobs` with the shared ones it takes; read it with `d.knobs`.
//! 2. Its `mod` line and one line in [`VARIANTS`].
//!
//! That is all. State it keeps per instance (lua's shared calls, the shares `shares`
//! holds) is a field of [`VariantState`], made once at start by its `start(&Start)`, and
//! reached as `d.app.variant_state.<name>`.

pub mod close_guard;
mod context;
mod deduction;
mod fault;
mod holding;
mod in_database;
pub(crate) mod lost;
mod sale;
pub(crate) mod section;

pub mod lua;
pub mod multi;
pub mod naive;
pub mod optimistic;
pub mod pg_advisory;
pub mod pg_for_update;
pub mod pg_unique;
pub mod pg_update;
pub mod pg_version;
pub mod redlock;
pub mod segmented;
pub mod setnx;
pub mod shares;
pub mod token;
pub mod watchdog;
pub mod zookeeper;

pub use crate::outcome::Outcome;
pub use context::{Context, Settings};
pub use deduction::Deduction;
pub use lost::SETTLE_FOR;
pub use section::INSIDE_MARGIN;

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use anyhow::Context as _;
use futures_util::future::BoxFuture;

use crate::error::AppError;
use crate::knobs::Knob;
use crate::store::{Confirmations, Store};

/// Every variant: the progression's order, then those that need servers of their own.
pub static VARIANTS: &[Variant] = &[
    Variant::of(&naive::SPEC),
    Variant::of(&setnx::SPEC),
    Variant::of(&token::SPEC),
    Variant::of(&watchdog::SPEC),
    Variant::of(&segmented::SPEC),
    Variant::of(&shares::SPEC),
    Variant::of(&lua::SPEC),
    Variant::of(&optimistic::SPEC),
    Variant::of(&redlock::SPEC),
    Variant::of(&multi::SPEC),
    Variant::of(&zookeeper::SPEC),
    Variant::of(&pg_unique::SPEC),
    Variant::of(&pg_advisory::SPEC),
    Variant::of(&pg_update::SPEC),
    Variant::of(&pg_for_update::SPEC),
    Variant::of(&pg_version::SPEC),
];

/// What a variant is, for everything that is not its deduction.
pub struct Spec {
    /// Its path, `/deduct_stock/<name>`, and its name in orders, metrics and JSON.
    pub name: &'static str,
    /// What it does and what it shows, in one line (the page, `--help`).
    pub summary: &'static str,
    /// Its colour on the page and in the bench's chart.
    pub color: &'static str,
    /// The knobs it takes besides `product`. Taking `wait_ms` is what makes it wait for a
    /// lock (the bench gives those a wait).
    pub knobs: &'static [Knob],
    /// One step of the progression on one Redis (the bench runs these by default), rather
    /// than one that needs servers of its own.
    pub in_progression: bool,
    /// It sells a product split into shards (the others sell an unsplit one).
    pub splits_stock: bool,
    /// It sells from the product's one stock (not its shards, an instance's share or a
    /// cart's several products): a "sold out" it answers speaks for the whole product, so
    /// the front door's sold-out flag may be raised on it.
    pub whole_stock: bool,
    /// It sells a product whose stock is in PostgreSQL (reset with `"stock_in":
    /// "postgres"`), and records its orders there; the others sell Redis's stock.
    pub stock_in_database: bool,
    /// Cutting a deduction short (the client hung up, the request timed out) could leave
    /// a lock held or a unit unrecorded, so it runs in a task of its own to the end.
    pub must_finish: bool,
    /// Its script counts the requests that sold nothing; otherwise the deduction does.
    pub counts_its_refusals: bool,
    /// One deduction.
    pub deduct: for<'a> fn(&'a Deduction) -> BoxFuture<'a, Result<Outcome, AppError>>,
}

/// What the variants that keep something per instance keep, a field each, made once at
/// start ([`VariantState::start`]). A variant that keeps something adds its field here.
pub struct VariantState {
    /// `lua`: the queue of deductions it sends to Redis together.
    pub lua: lua::LuaBatches,
    /// `optimistic`: its transactions' connections, a pool per master.
    pub optimistic: optimistic::Transactions,
    /// `shares`: this instance's shares, one per product.
    pub shares: shares::Shares,
}

impl VariantState {
    pub fn start(start: &Start<'_>) -> anyhow::Result<Self> {
        Ok(Self {
            lua: lua::start(start),
            optimistic: optimistic::start(start).context("starting optimistic")?,
            shares: shares::start(start),
        })
    }
}

/// What a variant's per-instance state is made from.
pub struct Start<'a> {
    pub settings: &'a Settings,
    /// The stock store.
    pub store: &'a Store,
    /// `--redis-wait-replicas`, when asked for.
    pub sale_confirmations: Option<&'a Arc<Confirmations>>,
    /// `--tx-connections`: connections per master for `optimistic`'s transactions.
    pub tx_connections: u64,
    /// `--share-lease-ms`: how long an instance's share (`shares`) outlives its last sale.
    pub share_lease: std::time::Duration,
}

/// One variant: a handle on its [`Spec`] in the registry. Cheap to copy and compare.
#[derive(Clone, Copy)]
pub struct Variant(&'static Spec);

impl Variant {
    /// The variant `spec` describes (`Variant::of(&watchdog::SPEC)`).
    pub const fn of(spec: &'static Spec) -> Self {
        Self(spec)
    }

    pub fn spec(self) -> &'static Spec {
        self.0
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    pub fn parse(name: &str) -> Option<Self> {
        VARIANTS.iter().copied().find(|v| v.name() == name)
    }

    /// The progression on one Redis, in its order.
    pub fn progression() -> impl Iterator<Item = Self> {
        VARIANTS.iter().copied().filter(|v| v.0.in_progression)
    }

    /// Whether it takes the knob named `name`.
    pub fn takes(self, name: &str) -> bool {
        self.0.knobs.iter().any(|k| k.name == name)
    }
}

impl PartialEq for Variant {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Variant {}

impl Hash for Variant {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl fmt::Debug for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Variant {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl clap::ValueEnum for Variant {
    fn value_variants<'a>() -> &'a [Self] {
        VARIANTS
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()).help(self.0.summary))
    }
}

/// The variant an instance serves at `/deduct_stock` unless told otherwise.
pub fn lua() -> Variant {
    Variant::of(&lua::SPEC)
}

#[cfg(test)]
mod knob_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for variant in VARIANTS {
            assert_eq!(Variant::parse(variant.name()), Some(*variant));
            let same = VARIANTS.iter().filter(|v| v.name() == variant.name());
            assert_eq!(same.count(), 1, "{variant} twice");
            assert!(variant.spec().color.starts_with('#'), "{variant}");
        }
        assert!(Variant::parse("nope").is_none());
    }
}
