//! The waiting suite's ratios: what waiting for a lock costs Redis, and the lock's tries.

use super::row;
use crate::ratio::Ratio;
use crate::row::Row;
use crate::scenario::variant;
use crate::scenario::{Key, WAITERS};

/// Waiting: Redis commands per unit sold with [`WAITERS`] against one client.
pub(super) fn ratios(rows: &[Row]) -> Vec<Ratio> {
    let mut ratios = Vec::new();
    for (name, target) in [("watchdog", Some(2.0)), ("token", None)] {
        let variant = variant(name);
        let one = row(
            rows,
            Key::Clients {
                variant,
                clients: 1,
            },
        );
        let many = row(
            rows,
            Key::Clients {
                variant,
                clients: WAITERS,
            },
        );
        if name == "watchdog"
            && let Some(many) = many
            && let Some((tries, wakeups)) = many.lock_tries_per_unit
        {
            // A waiter tries once, once more per wake-up (twice when the wake-up lands
            // while it is trying), and once more at the end of a wait that runs out (a
            // 429): more than that is a spin, as a waiter woken while trying once did,
            // back to back until it won.
            let busy = many.count(429) as f64 / many.sold.max(1) as f64;
            let bound = 1.0 + 2.0 * wakeups + 2.0 * busy;
            ratios.push(Ratio {
                name: "watchdog lock tries".into(),
                value: tries,
                target: format!("<= 1 + 2 x wake-ups + 2 x 429s ({bound:.2})"),
                met: Some(tries <= bound),
                of: format!(
                    "lock scripts sent by acquires per unit sold, {WAITERS} waiters; per unit {wakeups:.2} wake-ups, {busy:.2} 429s"
                ),
            });
            if let Some(without) = many.lock_tries_without_reason {
                let most = many.lock_most_tries.map_or(String::new(), |most| {
                    format!("; the most one acquire sent: {most}")
                });
                ratios.push(Ratio {
                    name: "watchdog tries without a reason".into(),
                    value: without as f64,
                    target: "0".into(),
                    met: Some(without == 0),
                    of: format!(
                        "lock scripts an acquire sent beyond one, one per wake-up it received and one per nap that ran out, {WAITERS} waiters{most}"
                    ),
                });
            }
        }
        if let (Some(one), Some(many)) = (one, many)
            && let (Some(a), Some(b)) = (one.redis_commands_per_unit, many.redis_commands_per_unit)
        {
            let value = b / a;
            ratios.push(Ratio {
                name: format!("{variant} waiting"),
                value,
                target: target.map_or("none: spin-and-retry, for contrast".into(), |t| {
                    format!("<= {t}")
                }),
                met: target.map(|t| value <= t),
                of: format!(
                    "Redis commands per unit sold, {WAITERS} waiters ({b:.1}) / one client ({a:.1}); Redis CPU per unit {:.1} / {:.1} us",
                    many.redis_cpu_us_per_unit.unwrap_or(f64::NAN),
                    one.redis_cpu_us_per_unit.unwrap_or(f64::NAN)
                ),
            });
        }
    }
    ratios
}
