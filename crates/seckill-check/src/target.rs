//! The target file: a stock service described in TOML — how to reset a product, buy one,
//! read the stock left, look up an order, read the service's own audit, and fault each
//! part of it — read and checked before any request is sent. Every error names its field.
//! `docs/src/check-your-service.md` documents each field; `check/seckill.toml` is one.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::template::{Slot, Template};

/// Statuses a buy's answer may have, by what they mean. Every other status, and no answer,
/// is unknown: the request may or may not have sold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meanings {
    pub sold: Vec<u16>,
    pub sold_out: Vec<u16>,
    /// Refused by a rule of the sale (the buyer's limit): nothing sold, rightly.
    pub refused: Vec<u16>,
    /// Refused as busy (a lock not had in time): nothing sold, though a unit may be left.
    pub busy: Vec<u16>,
}

/// What an answer's status says of a buy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Meaning {
    Sold,
    SoldOut,
    Refused,
    Busy,
    Unknown,
}

impl Meanings {
    pub fn of(&self, status: Option<u16>) -> Meaning {
        let Some(status) = status else {
            return Meaning::Unknown;
        };
        let is = |list: &[u16]| list.contains(&status);
        if is(&self.sold) {
            Meaning::Sold
        } else if is(&self.sold_out) {
            Meaning::SoldOut
        } else if is(&self.refused) {
            Meaning::Refused
        } else if is(&self.busy) {
            Meaning::Busy
        } else {
            Meaning::Unknown
        }
    }
}

/// One request a target file describes.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: reqwest::Method,
    pub path: Template,
    pub headers: Vec<(reqwest::header::HeaderName, Template)>,
    pub body: Template,
}

impl Request {
    /// A `GET` of `path`, with no header and no body.
    pub fn get(path: Template) -> Self {
        Self {
            method: reqwest::Method::GET,
            path,
            headers: Vec::new(),
            body: Template::empty(),
        }
    }

    /// Whether the path, a header or the body holds `slot`.
    pub fn holds(&self, slot: Slot) -> bool {
        self.path.holds(slot)
            || self.body.holds(slot)
            || self.headers.iter().any(|h| h.1.holds(slot))
    }
}

/// What an order's look-up answers mean: it is there, or it is not. Any other status (a
/// store not configured, an error) leaves the order unknown, never missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub found: Vec<u16>,
    pub missing: Vec<u16>,
}

/// A read of one number from a JSON answer.
#[derive(Debug, Clone)]
pub struct Read {
    pub path: Template,
    pub pointer: String,
}

/// A part of the deployment and the shell commands that fault it, by name (`kill`,
/// `pause`, `resume`, `restart`, or any other).
pub type Part = BTreeMap<String, String>;

/// A fault in a phase: `run` of `part` once `at` of the phase's requests were answered,
/// and `then` once `then_after` more were answered after it ran (while a part is paused,
/// those answers are the client's timeouts).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    pub part: String,
    pub run: String,
    #[serde(default)]
    pub at: usize,
    pub then: Option<String>,
    pub then_after: Option<usize>,
}

/// One phase of load.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    #[serde(default = "Phase::default_name")]
    pub name: String,
    /// Distinct buyers (`u0`, `u1`, …), taken in turn.
    pub buyers: usize,
    pub requests: usize,
    pub concurrency: usize,
    /// Each purchase sent this many times with one idempotency key, as an app resends.
    #[serde(default = "Phase::one")]
    pub repeats: usize,
    #[serde(default)]
    pub faults: Vec<Fault>,
}

impl Phase {
    fn default_name() -> String {
        "load".into()
    }

    fn one() -> usize {
        1
    }
}

/// A target file, read and checked ([`Target::parse`]).
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub base: reqwest::Url,
    pub product: String,
    pub stock: i64,
    /// Units a buyer may hold; 0: no limit.
    pub limit: i64,
    pub timeout_ms: u64,
    /// One row each, by name: `{variant}` in the templates takes each value in turn
    /// (none: one row).
    pub variants: Vec<(String, String)>,
    pub reset: Request,
    pub buy: Request,
    pub meanings: Meanings,
    /// JSON pointer of the order id in a sale's answer.
    pub order: Option<String>,
    pub stock_left: Read,
    /// Looks an order up.
    pub orders: Option<(Request, Lookup)>,
    /// The service's own figures that must read 0, by name.
    pub audit: Option<(Template, BTreeMap<String, String>)>,
    pub parts: BTreeMap<String, Part>,
    pub phases: Vec<Phase>,
}
