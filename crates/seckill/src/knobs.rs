//! The per-request teaching knobs, parsed and bounded before anything touches Redis.
//!
//! Each variant takes only the knobs that mean something to it: asking `setnx` for a
//! `ttl_ms` is a 400 that says its lock has no TTL, not a value silently ignored.

use std::time::Duration;

use crate::config::Limits;
use crate::error::AppError;
use crate::keys::ProductId;
use crate::product::MAX_STOCK;
use crate::variant::Variant;

/// The product sold when a request names none, as in the seed.
pub const DEFAULT_PRODUCT: &str = "101";
/// The token lock's TTL when a request names none (the seed's 30 s).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// How long watchdog and segmented requests wait for a held lock when they name no
/// `wait_ms`: users of these variants wait rather than fail.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(5);

/// A fault a request asks for; only honoured on instances started with `--faults`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The holder stops without releasing its lock, as if its process died.
    Abandon,
    /// The holder sleeps between checking it owns the lock and deleting it.
    PauseBeforeRelease(Duration),
}

/// One request's knobs, every value inside the instance's bounds.
#[derive(Debug, Clone)]
pub struct Knobs {
    pub product: ProductId,
    /// Business time spent inside the critical section.
    pub work: Duration,
    /// The token lock's TTL.
    pub ttl: Option<Duration>,
    /// The watchdog lock's lease; when given, no watchdog renews it (as in Redisson).
    pub lease: Option<Duration>,
    /// How long to wait for a held lock: `wait_ms`, or the variant's default (none for
    /// token, a few seconds for watchdog and segmented).
    pub wait: Duration,
    pub fault: Option<Fault>,
    /// lua only: send this deduction in the instance's next shared call (`batch=on`, the
    /// default) or in a call of its own (`batch=off`).
    pub batch: bool,
    /// Lock variants: present a fencing token at the stock (`fence=on`), so that a commit
    /// from a holder older than one the stock has already seen is refused. Off by default,
    /// so that the lessons fail as the seeds say.
    pub fence: bool,
    /// watchdog and segmented: take the lock in arrival order across instances (`fair=on`),
    /// as Redisson's fair lock does. Off by default: the unfair lock is faster.
    pub fair: bool,
    /// watchdog and segmented: a holder may hand the lock straight to a waiter of its own
    /// instance (`handoff=on`, the default); `off` always releases for everybody, to compare.
    pub handoff: bool,
    /// shares: units an instance claims at a time; `None` for a tenth of the initial stock.
    pub share_units: Option<i64>,
}

impl Knobs {
    /// Parses `params` (query string and form body together) for `variant`.
    pub fn parse(
        variant: Variant,
        params: &[(String, String)],
        limits: &Limits,
        faults_enabled: bool,
    ) -> Result<Self, AppError> {
        let accepted = variant.knobs();
        let mut seen: Vec<&str> = Vec::with_capacity(params.len());
        for (name, _) in params {
            if seen.contains(&name.as_str()) {
                return Err(bad(format!("parameter {} is given twice", quoted(name))));
            }
            seen.push(name);
            if name != "product" && !accepted.contains(&name.as_str()) {
                let takes = std::iter::once("product")
                    .chain(accepted.iter().copied())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(bad(format!(
                    "variant {variant} takes no parameter {}; it takes: {takes}",
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
            None => ProductId::parse(DEFAULT_PRODUCT).expect("the default product id is valid"),
            Some(raw) => ProductId::parse(raw).map_err(bad)?,
        };
        let work = millis(get("work_ms"), "work_ms", 0, limits.max_work_ms)?.unwrap_or_default();
        let ttl = millis(get("ttl_ms"), "ttl_ms", 10, limits.max_ttl_ms)?;
        let lease = millis(get("lease_ms"), "lease_ms", 10, limits.max_ttl_ms)?;
        let default_wait = match variant {
            Variant::Watchdog | Variant::Segmented | Variant::Redlock | Variant::Shares => {
                DEFAULT_LOCK_WAIT.min(Duration::from_millis(limits.max_wait_ms))
            }
            _ => Duration::ZERO,
        };
        let wait =
            millis(get("wait_ms"), "wait_ms", 0, limits.max_wait_ms)?.unwrap_or(default_wait);
        let pause = millis(get("pause_ms"), "pause_ms", 0, limits.max_pause_ms)?;

        let fault = match (get("fault"), pause) {
            (None, None) => None,
            (_, _) if !faults_enabled => {
                return Err(bad(
                    "fault injection is off on this instance (start it with --faults)".into(),
                ));
            }
            (Some("abandon"), None) => Some(Fault::Abandon),
            (Some("pause_before_release"), Some(pause)) => Some(Fault::PauseBeforeRelease(pause)),
            (Some("pause_before_release"), None) => {
                return Err(bad("fault=pause_before_release needs pause_ms".into()));
            }
            (Some("abandon") | None, Some(_)) => {
                return Err(bad("pause_ms goes with fault=pause_before_release".into()));
            }
            (Some(other), _) => {
                return Err(bad(format!(
                    "fault {} is not one of: abandon, pause_before_release",
                    quoted(other)
                )));
            }
        };

        let batch = switch(get("batch"), "batch", true)?;
        let share_units = match get("share_units") {
            None => None,
            Some(raw) => match raw.parse::<i64>() {
                Ok(units) if (1..=MAX_STOCK).contains(&units) && raw.len() <= 20 => Some(units),
                _ => {
                    return Err(bad(format!(
                        "share_units must be a whole number from 1 to {MAX_STOCK}, got {}",
                        quoted(raw)
                    )));
                }
            },
        };

        let fence = switch(get("fence"), "fence", false)?;
        let fair = switch(get("fair"), "fair", false)?;
        let handoff = switch(get("handoff"), "handoff", true)?;

        Ok(Self {
            product,
            work,
            ttl,
            lease,
            wait,
            fault,
            batch,
            fence,
            fair,
            handoff,
            share_units,
        })
    }

    /// The pause of `fault=pause_before_release`, if asked for.
    pub fn pause_before_release(&self) -> Option<Duration> {
        match self.fault {
            Some(Fault::PauseBeforeRelease(pause)) => Some(pause),
            _ => None,
        }
    }

    pub fn abandons(&self) -> bool {
        self.fault == Some(Fault::Abandon)
    }
}

fn bad(message: String) -> AppError {
    AppError::BadRequest(message)
}

/// An `on`/`off` knob, `default` when not given.
fn switch(raw: Option<&str>, name: &str, default: bool) -> Result<bool, AppError> {
    match raw {
        None => Ok(default),
        Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(bad(format!(
            "{name} must be on or off, got {}",
            quoted(other)
        ))),
    }
}

/// A whole number of milliseconds in `min..=max`.
fn millis(raw: Option<&str>, name: &str, min: u64, max: u64) -> Result<Option<Duration>, AppError> {
    let Some(raw) = raw else { return Ok(None) };
    match raw.parse::<u64>() {
        Ok(ms) if (min..=max).contains(&ms) && raw.len() <= 20 => {
            Ok(Some(Duration::from_millis(ms)))
        }
        _ => Err(bad(format!(
            "{name} must be a whole number of milliseconds from {min} to {max}, got {}",
            quoted(raw)
        ))),
    }
}

/// A client's text, quoted and cut short, for an error message.
fn quoted(raw: &str) -> String {
    const MAX: usize = 40;
    let cut: String = raw.chars().take(MAX).collect();
    if cut.len() < raw.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct LimitsOnly {
        #[command(flatten)]
        limits: Limits,
    }

    fn limits() -> Limits {
        LimitsOnly::parse_from(["x"]).limits
    }

    fn parse(variant: Variant, query: &str, faults: bool) -> Result<Knobs, AppError> {
        let params: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap();
        Knobs::parse(variant, &params, &limits(), faults)
    }

    #[test]
    fn defaults_sell_product_101_with_no_work() {
        let knobs = parse(Variant::Token, "", false).unwrap();
        assert_eq!(knobs.product.as_str(), "101");
        assert_eq!(knobs.work, Duration::ZERO);
        assert!(knobs.fault.is_none());
    }

    #[test]
    fn refuses_what_the_variant_does_not_take() {
        assert!(parse(Variant::Setnx, "ttl_ms=100", false).is_err());
        assert!(parse(Variant::Lua, "work_ms=1", false).is_err());
        assert!(!parse(Variant::Lua, "batch=off", false).unwrap().batch);
        assert!(parse(Variant::Lua, "batch=1", false).is_err());
        assert!(parse(Variant::Token, "batch=off", false).is_err());
        assert!(parse(Variant::Token, "ttl_ms=100&wait_ms=5", false).is_ok());
        assert!(parse(Variant::Token, "lease_ms=100", false).is_err());
        assert!(parse(Variant::Watchdog, "lease_ms=100&wait_ms=5", false).is_ok());
        assert!(parse(Variant::Segmented, "ttl_ms=100", false).is_err());
    }

    #[test]
    fn refuses_duplicates_bounds_and_non_numbers() {
        for query in [
            "work_ms=1&work_ms=2",
            "work_ms=-1",
            "work_ms=1.5",
            "work_ms=999999999",
            "work_ms=",
            "ttl_ms=0",
            "product=a%7Bb",
            "product=",
        ] {
            assert!(
                parse(Variant::Token, query, true).is_err(),
                "{query} accepted"
            );
        }
    }

    #[test]
    fn faults_need_the_instance_flag() {
        assert!(parse(Variant::Token, "fault=abandon", false).is_err());
        assert_eq!(
            parse(Variant::Token, "fault=abandon", true).unwrap().fault,
            Some(Fault::Abandon)
        );
        assert!(parse(Variant::Token, "fault=pause_before_release", true).is_err());
        assert!(parse(Variant::Token, "pause_ms=5", true).is_err());
        assert!(parse(Variant::Token, "fault=explode", true).is_err());
    }
}
