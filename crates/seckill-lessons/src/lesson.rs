//! What a lesson is: its texts in both languages, what it needs of the instances, and its
//! phases (a reset, an optional first request, a load). The lessons themselves are in
//! [`crate::catalogue`].

use seckill_load::Buyers;
use serde::Serialize;

/// A lesson: a title, what to watch for and why it happens (in English and in Chinese, for
/// the seeds' readers), what the instances need for it, and its phases.
#[derive(Debug, Clone, Serialize)]
pub struct Lesson {
    pub name: &'static str,
    pub title: &'static str,
    pub title_zh: &'static str,
    /// What to watch for, and why it happens.
    pub watch: &'static str,
    pub watch_zh: &'static str,
    pub phases: &'static [Phase],
    /// What the instances must have been started with.
    pub needs: Needs,
    /// One of the progression's failure modes (or its cure on the same terms), which the
    /// bench's `--lessons` adds to the progression as a row.
    pub failure_mode: bool,
}

/// What a lesson needs of the instances, by the flag that gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Needs {
    #[serde(rename = "")]
    Nothing,
    #[serde(rename = "--faults")]
    Faults,
    #[serde(rename = "--redlock-urls")]
    RedlockServers,
    #[serde(rename = "--zookeeper-urls")]
    ZooKeeper,
    #[serde(rename = "--orders-db")]
    OrdersDb,
    #[serde(rename = "--orders-db --faults")]
    OrdersDbAndFaults,
}

impl Needs {
    /// The flag that gives it.
    pub fn flag(self) -> &'static str {
        match self {
            Needs::Nothing => "",
            Needs::Faults => "--faults",
            Needs::RedlockServers => "--redlock-urls",
            Needs::ZooKeeper => "--zookeeper-urls",
            Needs::OrdersDb => "--orders-db",
            Needs::OrdersDbAndFaults => "--orders-db --faults",
        }
    }
}

/// One phase of a lesson: a reset, an optional first request (a fault), then the load.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// The phase, in a few words: the bench's row label and the page's.
    pub label: &'static str,
    pub stock: i64,
    pub shards: u32,
    /// Units one buyer may have (0: no limit).
    pub per_user: i64,
    /// The variant's name, as the service's registry knows it (`"watchdog"`).
    pub variant: &'static str,
    /// The load's knobs, as a query string. `{cart}` and `{cart_reversed}` stand for the
    /// lesson's product and a second one (`<product>-b`, reset with it), in that order
    /// and the other.
    pub knobs: &'static str,
    /// Every other request's knobs, when the load alternates between two.
    pub alternate: Option<&'static str>,
    /// Knobs of a request sent alone before the load (a fault), as a query string.
    pub first: Option<&'static str>,
    /// Who buys, when the requests name buyers.
    #[serde(skip)]
    pub buyers: Option<Buyers>,
    /// `/admin/close` this long after the load starts.
    pub close_after_ms: Option<u64>,
    /// The sale's orders go to the orders' database.
    pub streamed: bool,
    /// The sale's front door (a waiting room, the sold-out flag), as the reset sets it.
    #[serde(skip)]
    pub door: Opening,
    /// How long a buyer has to pay, ms (0: a sale is final).
    pub pay_within_ms: i64,
    /// Buyers instead of a load: `requests` buyers arriving evenly over this many ms,
    /// each on their own (through the room when the phase has one) until served.
    pub arrivals_over_ms: Option<u64>,
    pub requests: usize,
    pub concurrency: usize,
}

impl Phase {
    /// `variant?knobs`, as a deduction's path ends.
    pub fn path(&self) -> String {
        with_knobs(self.variant, self.knobs)
    }

    /// The alternate requests' `variant?knobs`, when the load has them.
    pub fn alternate_path(&self) -> Option<String> {
        self.alternate.map(|knobs| with_knobs(self.variant, knobs))
    }

    /// The first request's `variant?knobs`, when the phase has one.
    pub fn first_path(&self) -> Option<String> {
        self.first.map(|knobs| with_knobs(self.variant, knobs))
    }

    /// Whether the phase sells a second product (`{cart}`).
    pub fn has_cart(&self) -> bool {
        self.knobs.contains("{cart")
    }
}

fn with_knobs(variant: &str, knobs: &str) -> String {
    if knobs.is_empty() {
        variant.to_owned()
    } else {
        format!("{variant}?{knobs}")
    }
}

pub(crate) const fn phase(
    label: &'static str,
    stock: i64,
    shards: u32,
    variant: &'static str,
    knobs: &'static str,
    requests: usize,
    concurrency: usize,
) -> Phase {
    Phase {
        label,
        stock,
        shards,
        per_user: 0,
        variant,
        knobs,
        alternate: None,
        first: None,
        buyers: None,
        close_after_ms: None,
        streamed: false,
        door: Opening::WIDE_OPEN,
        pay_within_ms: 0,
        arrivals_over_ms: None,
        requests,
        concurrency,
    }
}

/// What a reset opens the sale's front door with (the service's own terms, as far as the
/// lessons use them); [`Opening::WIDE_OPEN`] lets every request through to the stock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Opening {
    /// A waiting room in front of the stock.
    pub room: Option<Room>,
    /// The sold-out flag.
    pub flag: Flag,
}

impl Opening {
    /// No room, no flag: every request asks the stock.
    pub const WIDE_OPEN: Self = Self {
        room: None,
        flag: Flag::Off,
    };

    /// A door that lets every request through to the stock.
    pub const fn is_wide_open(&self) -> bool {
        self.room.is_none() && matches!(self.flag, Flag::Off)
    }
}

/// A waiting room: buyers let in `rate_per_s` a second, each pass good for `pass_ttl_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    pub rate_per_s: u32,
    pub pass_ttl_ms: u64,
}

/// The sold-out flag: what an instance answers once it has seen the stock run out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Flag {
    /// Every request asks the stock.
    #[default]
    Off,
    /// Answered from memory, and forgotten when a unit may be back.
    On,
    /// Forgotten only when a reset starts another sale (the demos' flag).
    Sticky,
}
