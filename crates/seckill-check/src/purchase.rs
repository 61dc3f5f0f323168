//! Purchases: the requests sent under one idempotency key (a click and its resends), or a
//! request of its own when the buy carries no key. The rules count units by purchase, not
//! by request: a resend answered with the sale already made is the same unit, and a key
//! whose first send got no answer is settled by a later answer to the same key.

use std::collections::{BTreeMap, BTreeSet};

use crate::op::Op;
use crate::target::Meaning;

/// How a purchase ended, as far as the clients know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Sold: the first request of each distinct unit — each distinct order its answers
    /// named, or the first sale when none named one.
    Sold(Vec<usize>),
    /// Nothing sold, as its latest answer says (sold out, refused; busy only when every
    /// send was turned away busy).
    NotSold(Meaning),
    /// No answer says: its requests went unanswered, or the latest did.
    Unknown,
}

/// One purchase: its requests (indices into the row's ops, in the order sent) and how it
/// ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purchase {
    pub ops: Vec<usize>,
    pub outcome: Outcome,
}

impl Purchase {
    pub fn is_unknown(&self) -> bool {
        self.outcome == Outcome::Unknown
    }
}

/// The row's purchases, each key's requests together, in the order first sent.
pub fn purchases(ops: &[Op]) -> Vec<Purchase> {
    let mut by_key: BTreeMap<&str, usize> = BTreeMap::new();
    let mut grouped: Vec<Vec<usize>> = Vec::new();
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by_key(|&i| ops[i].sent);
    for i in order {
        match &ops[i].key {
            Some(key) => {
                let at = *by_key.entry(key).or_insert_with(|| {
                    grouped.push(Vec::new());
                    grouped.len() - 1
                });
                grouped[at].push(i);
            }
            None => grouped.push(vec![i]),
        }
    }
    grouped
        .into_iter()
        .map(|ops_of| Purchase {
            outcome: outcome(ops, &ops_of),
            ops: ops_of,
        })
        .collect()
}

fn outcome(ops: &[Op], mine: &[usize]) -> Outcome {
    let sold: Vec<usize> = mine
        .iter()
        .copied()
        .filter(|&i| ops[i].meaning == Meaning::Sold)
        .collect();
    if !sold.is_empty() {
        let mut named = BTreeSet::new();
        let units: Vec<usize> = sold
            .iter()
            .copied()
            .filter(|&i| ops[i].order.as_ref().is_some_and(|o| named.insert(o)))
            .collect();
        return Outcome::Sold(if units.is_empty() {
            vec![sold[0]]
        } else {
            units
        });
    }
    // The latest answer sent decides: a resend answered "sold out" after a first send that
    // got none says the key sold nothing (a service that sold it and then said otherwise
    // shows as units taken unsold). Busy does not: a lock or a rate limit turning a resend
    // away says nothing of a send before it, which may still be under way and sell.
    let latest = |meaning: fn(Meaning) -> bool| {
        mine.iter()
            .filter(|&&i| meaning(ops[i].meaning))
            .max_by_key(|&&i| ops[i].sent)
            .map(|&i| ops[i].meaning)
    };
    match latest(|m| m != Meaning::Busy) {
        Some(Meaning::Unknown) => Outcome::Unknown,
        Some(meaning) => Outcome::NotSold(meaning),
        None if mine.is_empty() => Outcome::Unknown,
        None => Outcome::NotSold(Meaning::Busy),
    }
}

/// The first request of every unit sold, over all purchases.
pub fn sales(purchases: &[Purchase]) -> Vec<usize> {
    purchases
        .iter()
        .flat_map(|p| match &p.outcome {
            Outcome::Sold(units) => units.clone(),
            _ => Vec::new(),
        })
        .collect()
}
