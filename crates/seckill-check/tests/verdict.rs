//! The verdict's rules on histories written by hand: what a resend, an unknown answer, a
//! busy refusal and a missing order id come to. No service: the rows are built here, so
//! each rule is seen on the smallest history that shows it.

use std::collections::BTreeMap;
use std::time::Duration;

use seckill_check::run::{Op, Row};
use seckill_check::target::Meaning;
use seckill_check::verdict::{Conclusion, Verdict, judge};

/// A request of purchase `purchase` (key `k<purchase>` when `keyed`) by `u<buyer>`, sent
/// at `at` ms and answered 1 ms later.
fn op(
    at: u64,
    purchase: usize,
    buyer: usize,
    keyed: bool,
    meaning: Meaning,
    order: Option<&str>,
) -> Op {
    let status = match meaning {
        Meaning::Sold => Some(200),
        Meaning::SoldOut => Some(409),
        Meaning::Refused => Some(403),
        Meaning::Busy => Some(429),
        Meaning::Unknown => None,
    };
    Op {
        phase: 0,
        n: at as usize,
        purchase,
        buyer,
        key: keyed.then(|| format!("k{purchase}")),
        sent: Duration::from_millis(at),
        done: Duration::from_millis(at + 1),
        status,
        meaning,
        order: order.map(str::to_owned),
    }
}

fn row(initial: i64, left: i64, ops: Vec<Op>) -> Row {
    Row {
        label: "hand-written".into(),
        initial,
        limit: 0,
        names_orders: false,
        ops,
        left,
        lookups: BTreeMap::new(),
        own: BTreeMap::new(),
        faults: Vec::new(),
        resent: 0,
        elapsed: Duration::from_millis(100),
    }
}

fn rules(verdict: &Verdict) -> Vec<&'static str> {
    verdict.findings.iter().map(|f| f.rule).collect()
}

#[test]
fn a_resend_answered_with_the_same_sale_is_one_unit_even_without_its_order() {
    // One unit on sale; the click and its resend both told "sold", the resend's answer
    // naming no order (a service that answers a replay with `{"duplicate": true}`).
    let ops = vec![
        op(0, 0, 0, true, Meaning::Sold, Some("o1")),
        op(1, 0, 0, true, Meaning::Sold, None),
    ];
    let verdict = judge(&row(1, 0, ops));
    assert_eq!(verdict.sold, 1);
    assert_eq!(
        verdict.conclusion(),
        Conclusion::Pass,
        "{:?}",
        verdict.findings
    );
}

#[test]
fn a_key_that_sold_two_orders_is_two_units_and_a_finding() {
    let ops = vec![
        op(0, 0, 0, true, Meaning::Sold, Some("o1")),
        op(1, 0, 0, true, Meaning::Sold, Some("o2")),
    ];
    let verdict = judge(&row(2, 0, ops));
    assert_eq!(verdict.sold, 2);
    assert_eq!(rules(&verdict), ["two orders for a key"]);
    assert_eq!(verdict.conclusion(), Conclusion::Fail);
}

#[test]
fn a_run_where_nothing_was_learned_is_inconclusive_never_a_pass() {
    // Every answer unknown (a wrong path answered 404, which the file does not name): up to
    // five units sold that never left the stock, or none.
    let ops = (0..5)
        .map(|i| op(i, i as usize, i as usize, false, Meaning::Unknown, None))
        .collect();
    let verdict = judge(&row(3, 3, ops));
    assert!(verdict.findings.is_empty());
    assert_eq!(
        (verdict.lost_updates.least, verdict.lost_updates.most),
        (0, 5)
    );
    assert_eq!(verdict.conclusion(), Conclusion::Inconclusive);
}

#[test]
fn a_later_answer_to_the_same_key_settles_an_unknown() {
    // The first send got no answer; its resend was told sold out: nothing sold.
    let ops = vec![
        op(0, 0, 0, true, Meaning::Sold, Some("o1")),
        op(1, 1, 1, true, Meaning::Unknown, None),
        op(5, 1, 1, true, Meaning::SoldOut, None),
    ];
    let verdict = judge(&row(1, 0, ops));
    assert_eq!((verdict.unknown, verdict.sold_out), (0, 1));
    assert_eq!(
        verdict.conclusion(),
        Conclusion::Pass,
        "{:?}",
        verdict.findings
    );
}

#[test]
fn a_busy_resend_leaves_a_send_without_an_answer_unknown() {
    // The first send got no answer and may still be selling (it did: the stock is 0); its
    // resend was turned away busy, which says nothing of it. Unknown, not "nothing sold":
    // read as nothing sold, the unit it took would be a FAIL of a service that kept its key.
    let ops = vec![
        op(0, 0, 0, true, Meaning::Unknown, None),
        op(5, 0, 0, true, Meaning::Busy, None),
    ];
    let verdict = judge(&row(1, 0, ops));
    assert_eq!((verdict.unknown, verdict.busy), (1, 0));
    assert!(verdict.findings.is_empty(), "{:?}", verdict.findings);
    assert_eq!(verdict.conclusion(), Conclusion::Inconclusive);
}

#[test]
fn a_unit_taken_while_its_buyer_was_told_sold_out_is_unaccounted() {
    // The resend of a key whose first send sold (its answer lost) is told sold out: the
    // service broke its key, and a unit left the stock that no sale accounts for.
    let ops = vec![
        op(0, 0, 0, true, Meaning::Unknown, None),
        op(5, 0, 0, true, Meaning::SoldOut, None),
    ];
    let verdict = judge(&row(1, 0, ops));
    assert_eq!(rules(&verdict), ["unaccounted"]);
}

#[test]
fn busy_refusals_are_undersold_only_when_the_buyers_wanted_every_unit() {
    // 10 units, 3 purchases: one sold, two busy. Units are left whatever the service does.
    let few = vec![
        op(0, 0, 0, false, Meaning::Sold, Some("o1")),
        op(1, 1, 1, false, Meaning::Busy, None),
        op(2, 2, 2, false, Meaning::Busy, None),
    ];
    let verdict = judge(&row(10, 9, few));
    assert_eq!(verdict.undersold, 0);
    assert_eq!(
        verdict.conclusion(),
        Conclusion::Pass,
        "{:?}",
        verdict.findings
    );
    // 2 units, 3 purchases: one sold, two busy, one unit left: a buyer could have had it.
    let many = vec![
        op(0, 0, 0, false, Meaning::Sold, Some("o1")),
        op(1, 1, 1, false, Meaning::Busy, None),
        op(2, 2, 2, false, Meaning::Busy, None),
    ];
    let verdict = judge(&row(2, 1, many));
    assert_eq!(verdict.undersold, 1);
    assert_eq!(rules(&verdict), ["undersold"]);
}

#[test]
fn stock_below_zero_is_oversold_and_a_sale_naming_no_order_is_a_finding() {
    let ops = vec![
        op(0, 0, 0, false, Meaning::Sold, Some("o1")),
        op(1, 1, 1, false, Meaning::Sold, None),
    ];
    let mut hand = row(1, -1, ops);
    hand.names_orders = true;
    let verdict = judge(&hand);
    assert_eq!(rules(&verdict), ["oversold", "sale names no order"]);
}

#[test]
fn a_buyer_past_the_limit_and_a_missing_order_are_found() {
    let ops = vec![
        op(0, 0, 7, false, Meaning::Sold, Some("o1")),
        op(1, 1, 7, false, Meaning::Sold, Some("o2")),
    ];
    let mut hand = row(2, 0, ops);
    hand.limit = 1;
    hand.lookups.insert("o1".into(), true);
    hand.lookups.insert("o2".into(), false);
    let verdict = judge(&hand);
    assert_eq!(rules(&verdict), ["past the limit", "missing orders"]);
}
