//! The per-request teaching knobs: declared where they mean something, parsed and bounded
//! before anything touches Redis.
//!
//! A [`Knob`] is a declaration — its name, what it does, and how its value is read and
//! bounded. The knobs the lock variants share are declared in `lock_knobs.rs`; a knob only one
//! variant uses is declared in that variant's file (lua's `batch`, shares' `share_units`). Each
//! variant lists the knobs it takes in its [`Spec`](crate::variants::Spec), and asking it for
//! any other is a 400 that says which it takes, never a value silently ignored. The API's
//! description (`/openapi.json`) is written from the same declarations.

mod limits;
mod lock_knobs;
mod read;

pub use limits::Limits;

/// How long past its own work a holder may stay in the audit's "inside" set: the time it
/// needs for its last Redis round trips under load. A holder that dies inside stops
/// counting as inside after its work plus this margin; a request's idempotency claim is
/// taken over only past its longest time plus this margin.
pub const INSIDE_MARGIN: Duration = Duration::from_secs(2);
pub use lock_knobs::{
    DEFAULT_LOCK_WAIT_MS, FAULT, FENCE, LEASE_MS, PAUSE_MS, STOP_FAULT, TTL_MS, WAIT_MS, WORK_MS,
};

use std::time::Duration;

use crate::error::AppError;
use crate::keys::{ProductId, UserId};
use read::{bad, quoted, read};

/// The parameters every variant takes besides its knobs.
pub const ALWAYS: [&str; 3] = ["product", "user", "pass"];

/// The product sold when a request names none, as in the seed.
pub const DEFAULT_PRODUCT: &str = "101";

/// [`DEFAULT_PRODUCT`], parsed: the product a request that names none is about.
pub fn default_product() -> ProductId {
    ProductId::parse(DEFAULT_PRODUCT).expect("the default product id is valid")
}

/// One knob a request may set.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    pub name: &'static str,
    /// What it does, for the API's description.
    pub doc: &'static str,
    pub kind: Kind,
}

/// How a knob's value is read and bounded.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Whole milliseconds from `min` to the instance's bound (`max`, from a flag), and
    /// `default` when the request gives none (`None`: unset), never above that bound.
    Millis {
        min: u64,
        max: fn(&Limits) -> u64,
        default: Option<u64>,
    },
    /// `on` or `off`.
    Switch { default: bool },
    /// A whole number from `min` to `max`; unset when not given.
    Count { min: i64, max: i64 },
    /// One of `values`; unset when not given.
    Choice { values: &'static [&'static str] },
    /// Distinct product ids, comma-separated, at most `max`; unset when not given.
    Products { max: usize },
}

impl Knob {
    /// The same knob with another default (`wait_ms` waits by default where the variant's
    /// users would rather wait than fail).
    pub const fn defaulting_to(self, ms: u64) -> Self {
        match self.kind {
            Kind::Millis { min, max, .. } => Self {
                kind: Kind::Millis {
                    min,
                    max,
                    default: Some(ms),
                },
                ..self
            },
            _ => self,
        }
    }
}

/// A fault a request asks for; only honoured on instances started with `--faults`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The holder stops without releasing its lock, as if its process died.
    Abandon,
    /// The holder sleeps before it gives its lock back.
    PauseBeforeRelease(Duration),
    /// The whole process stops (SIGSTOP to itself, every thread, as in a stop-the-world
    /// GC pause) for this long, right between the holder's last check and its commit.
    StopBeforeCommit(Duration),
}

/// A parsed value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Millis(Option<Duration>),
    Switch(bool),
    Count(Option<i64>),
    Choice(Option<&'static str>),
    Products(Vec<ProductId>),
}

/// One request's knobs, every value inside the instance's bounds.
#[derive(Debug, Clone)]
pub struct Knobs {
    pub product: ProductId,
    /// Who buys (`user`), when the request says; every variant takes it.
    pub user: Option<UserId>,
    /// The waiting room's pass (`pass`), when the request carries one: checked at the
    /// front door (`crate::admission`), never in Redis.
    pub pass: Option<String>,
    /// Every knob the variant takes, with its value or its default.
    values: Vec<(&'static str, Value)>,
    fault: Option<Fault>,
}

impl Knobs {
    /// Parses `params` (query string and form body together) for the variant named
    /// `variant`, which takes the knobs `takes` (its `Spec::knobs`).
    pub fn parse(
        variant: &str,
        takes: &[Knob],
        params: &[(String, String)],
        limits: &Limits,
        faults_enabled: bool,
    ) -> Result<Self, AppError> {
        let mut seen: Vec<&str> = Vec::with_capacity(params.len());
        for (name, _) in params {
            if seen.contains(&name.as_str()) {
                return Err(bad(format!("parameter {} is given twice", quoted(name))));
            }
            seen.push(name);
            if !ALWAYS.contains(&name.as_str()) && !takes.iter().any(|k| k.name == name) {
                let names = ALWAYS
                    .iter()
                    .copied()
                    .chain(takes.iter().map(|k| k.name))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(bad(format!(
                    "variant {variant} takes no parameter {}; it takes: {names}",
                    quoted(name)
                )));
            }
        }
        let get = |name: &str| {
            params
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };

        let product = match get("product") {
            None => default_product(),
            Some(raw) => ProductId::parse(raw).map_err(bad)?,
        };
        let user = get("user").map(UserId::parse).transpose().map_err(bad)?;
        let pass = match get("pass") {
            Some(pass) if pass.len() > crate::admission::room::MAX_TOKEN_LEN => {
                return Err(bad("pass is not one this service gives out".into()));
            }
            pass => pass.map(str::to_owned),
        };
        let values = takes
            .iter()
            .map(|knob| Ok((knob.name, read(knob, get(knob.name), limits)?)))
            .collect::<Result<Vec<_>, AppError>>()?;
        let mut knobs = Self {
            product,
            user,
            pass,
            values,
            fault: None,
        };
        knobs.fault = knobs.read_fault(faults_enabled)?;
        Ok(knobs)
    }

    /// `fault` and `pause_ms` together, refused unless the instance allows faults.
    fn read_fault(&self, faults_enabled: bool) -> Result<Option<Fault>, AppError> {
        let fault = match self.value(&FAULT) {
            Some(Value::Choice(fault)) => *fault,
            _ => None,
        };
        let pause = self.millis(&PAUSE_MS);
        Ok(match (fault, pause) {
            (None, None) => None,
            _ if !faults_enabled => {
                return Err(bad(
                    "fault injection is off on this instance (start it with --faults)".into(),
                ));
            }
            (Some("abandon"), None) => Some(Fault::Abandon),
            (Some("pause_before_release"), Some(pause)) => Some(Fault::PauseBeforeRelease(pause)),
            (Some("stop_before_commit"), Some(pause)) => Some(Fault::StopBeforeCommit(pause)),
            (Some(fault @ ("pause_before_release" | "stop_before_commit")), None) => {
                return Err(bad(format!("fault={fault} needs pause_ms")));
            }
            (_, Some(_)) => {
                return Err(bad(
                    "pause_ms goes with fault=pause_before_release or stop_before_commit".into(),
                ));
            }
            (Some(other), None) => {
                return Err(bad(format!("fault {} is not known", quoted(other))));
            }
        })
    }

    fn value(&self, knob: &Knob) -> Option<&Value> {
        self.values
            .iter()
            .find(|(name, _)| *name == knob.name)
            .map(|(_, value)| value)
    }

    /// A milliseconds knob's value; `None` when unset, or not one this variant takes.
    pub fn millis(&self, knob: &Knob) -> Option<Duration> {
        match self.value(knob) {
            Some(Value::Millis(value)) => *value,
            _ => None,
        }
    }

    /// A switch's value, or its default when this variant does not take it.
    pub fn switch(&self, knob: &Knob) -> bool {
        match (self.value(knob), knob.kind) {
            (Some(Value::Switch(on)), _) => *on,
            (_, Kind::Switch { default }) => default,
            _ => false,
        }
    }

    /// A count's value; `None` when unset.
    pub fn count(&self, knob: &Knob) -> Option<i64> {
        match self.value(knob) {
            Some(Value::Count(value)) => *value,
            _ => None,
        }
    }

    /// A choice's value; `None` when unset.
    pub fn choice(&self, knob: &Knob) -> Option<&'static str> {
        match self.value(knob) {
            Some(Value::Choice(value)) => *value,
            _ => None,
        }
    }

    /// A list of products; empty when unset.
    pub fn products(&self, knob: &Knob) -> &[ProductId] {
        match self.value(knob) {
            Some(Value::Products(products)) => products,
            _ => &[],
        }
    }

    /// The request's cart, when it names more than one product (a `Kind::Products` knob:
    /// `multi`'s `products`); `None` for a request that buys `product` alone.
    pub fn cart(&self) -> Option<&[ProductId]> {
        self.values.iter().find_map(|(_, value)| match value {
            Value::Products(products) if products.len() > 1 => Some(products.as_slice()),
            _ => None,
        })
    }

    /// Business time inside the critical section.
    pub fn work(&self) -> Duration {
        self.millis(&WORK_MS).unwrap_or_default()
    }

    /// How long to wait for a held lock.
    pub fn wait(&self) -> Duration {
        self.millis(&WAIT_MS).unwrap_or_default()
    }

    /// The longest the request may take besides its Redis round trips: its wait, its
    /// work and its pause.
    pub fn longest(&self) -> Duration {
        let pause = self.pause_before_release().or(self.stop_before_commit());
        self.wait() + self.work() + pause.unwrap_or_default()
    }

    /// `fence=on`.
    pub fn fence(&self) -> bool {
        self.switch(&FENCE)
    }

    pub fn fault(&self) -> Option<Fault> {
        self.fault
    }

    /// The pause of `fault=pause_before_release`, if asked for.
    pub fn pause_before_release(&self) -> Option<Duration> {
        match self.fault {
            Some(Fault::PauseBeforeRelease(pause)) => Some(pause),
            _ => None,
        }
    }

    /// The stop of `fault=stop_before_commit`, if asked for.
    pub fn stop_before_commit(&self) -> Option<Duration> {
        match self.fault {
            Some(Fault::StopBeforeCommit(pause)) => Some(pause),
            _ => None,
        }
    }

    pub fn abandons(&self) -> bool {
        self.fault == Some(Fault::Abandon)
    }
}
