//! Every variant's knobs as the registry declares them, parsed from a request: what each
//! takes, refuses, bounds and defaults.

use std::time::Duration;

use clap::Parser;

use super::{Variant, lua};
use crate::error::AppError;
use crate::knobs::{DEFAULT_LOCK_WAIT_MS, Fault, Knobs, Limits};

#[derive(Parser)]
struct LimitsOnly {
    #[command(flatten)]
    limits: Limits,
}

fn limits() -> Limits {
    LimitsOnly::parse_from(["x"]).limits
}

fn parse(variant: &str, query: &str, faults: bool) -> Result<Knobs, AppError> {
    let variant = Variant::parse(variant).expect("a variant");
    let params: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap();
    Knobs::parse(
        variant.name(),
        variant.spec().knobs,
        &params,
        &limits(),
        faults,
    )
}

#[test]
fn defaults_sell_product_101_with_no_work() {
    let knobs = parse("token", "", false).unwrap();
    assert_eq!(knobs.product.as_str(), "101");
    assert_eq!(knobs.work(), Duration::ZERO);
    assert_eq!(knobs.wait(), Duration::ZERO);
    assert!(knobs.fault().is_none());
    let waits = parse("watchdog", "", false).unwrap();
    assert_eq!(waits.wait(), Duration::from_millis(DEFAULT_LOCK_WAIT_MS));
}

#[test]
fn refuses_what_the_variant_does_not_take() {
    let batch = &lua::BATCH;
    assert!(parse("setnx", "ttl_ms=100", false).is_err());
    assert!(parse("lua", "work_ms=1", false).is_err());
    assert!(!parse("lua", "batch=off", false).unwrap().switch(batch));
    assert!(parse("lua", "", false).unwrap().switch(batch));
    assert!(parse("lua", "batch=1", false).is_err());
    assert!(parse("token", "batch=off", false).is_err());
    assert!(parse("token", "ttl_ms=100&wait_ms=5", false).is_ok());
    assert!(parse("token", "lease_ms=100", false).is_err());
    assert!(parse("watchdog", "lease_ms=100&wait_ms=5", false).is_ok());
    assert!(parse("segmented", "ttl_ms=100", false).is_err());
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
        assert!(parse("token", query, true).is_err(), "{query} accepted");
    }
}

#[test]
fn faults_need_the_instance_flag() {
    assert!(parse("token", "fault=abandon", false).is_err());
    assert_eq!(
        parse("token", "fault=abandon", true).unwrap().fault(),
        Some(Fault::Abandon)
    );
    assert!(parse("token", "fault=pause_before_release", true).is_err());
    assert!(parse("token", "pause_ms=5", true).is_err());
    assert!(parse("token", "fault=explode", true).is_err());
}
