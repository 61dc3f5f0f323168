//! The phases' checks: each phase's load and faults bounded, and a row's in all.

use std::collections::BTreeMap;

use super::within;
use crate::target::{Part, Phase, Request};
use crate::template::Slot;

/// Most phases in a file.
const MAX_PHASES: usize = 100;

/// Most requests a row's phases send in all: each phase may send up to a million.
const MAX_ROW_REQUESTS: usize = 2_000_000;

pub(super) fn check_phases(
    phases: &[Phase],
    parts: &BTreeMap<String, Part>,
    buy: &Request,
    limit: i64,
) -> Result<(), String> {
    if phases.is_empty() {
        return Err("phases: at least one [[phases]]".into());
    }
    // A row's whole history is kept in memory until it is judged: a bound on it, not only
    // on each phase.
    within("phases", phases.len(), 1, MAX_PHASES)?;
    let requests: usize = phases
        .iter()
        .map(|p| p.requests.min(MAX_ROW_REQUESTS))
        .sum();
    within("phases' requests in all", requests, 1, MAX_ROW_REQUESTS)?;
    let holds = |slot| buy.holds(slot);
    if limit > 0 && !holds(Slot::User) {
        return Err(
            "limit: a buyer's limit needs {user} in buy's path, a header or the body".into(),
        );
    }
    for (i, phase) in phases.iter().enumerate() {
        let field = format!("phases[{i}]");
        within(&format!("{field}.requests"), phase.requests, 1, 1_000_000)?;
        within(&format!("{field}.concurrency"), phase.concurrency, 1, 1_000)?;
        within(&format!("{field}.buyers"), phase.buyers, 1, 10_000_000)?;
        within(&format!("{field}.repeats"), phase.repeats, 1, 100)?;
        if phase.repeats > 1 && !holds(Slot::Key) {
            return Err(format!(
                "{field}.repeats: resending a purchase needs {{key}} in buy (an idempotency key)"
            ));
        }
        for (j, fault) in phase.faults.iter().enumerate() {
            let field = format!("{field}.faults[{j}]");
            let Some(part) = parts.get(&fault.part) else {
                return Err(format!("{field}.part: no [parts.{}]", fault.part));
            };
            for command in std::iter::once(&fault.run).chain(&fault.then) {
                if !part.contains_key(command) {
                    return Err(format!("{field}: [parts.{}] has no {command}", fault.part));
                }
            }
            within(&format!("{field}.at"), fault.at, 0, phase.requests)?;
            if fault.then.is_some() != fault.then_after.is_some() {
                return Err(format!("{field}: then and then_after go together"));
            }
            if let Some(after) = fault.then_after {
                within(
                    &format!("{field}.then_after"),
                    after,
                    0,
                    phase.requests - fault.at,
                )?;
            }
        }
    }
    Ok(())
}
