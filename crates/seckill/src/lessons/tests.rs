//! The lessons' bounds: each bounded, found by name, asking for knobs an instance accepts.

use super::catalogue::{LONG_WORK_MS, SHORT_TTL_MS};
use super::*;

#[test]
fn every_lesson_is_bounded_and_found_by_name() {
    for lesson in LESSONS {
        assert_eq!(find(lesson.name).map(|l| l.name), Some(lesson.name));
        assert!(!lesson.watch_zh.is_empty() && !lesson.title_zh.is_empty());
        for phase in lesson.phases {
            assert!(
                phase.requests <= 2_000 && phase.concurrency <= 100,
                "{}",
                lesson.name
            );
            assert_eq!(phase.shards > 1, phase.variant.spec().splits_stock);
        }
    }
    assert!(find("nope").is_none());
    let work = format!("work_ms={LONG_WORK_MS}&ttl_ms={SHORT_TTL_MS}");
    assert!(find("token").unwrap().phases[0].knobs.starts_with(&work));
    let lease = format!("work_ms={LONG_WORK_MS}&lease_ms={SHORT_TTL_MS}&renew=on");
    assert!(
        find("watchdog").unwrap().phases[0]
            .knobs
            .starts_with(&lease)
    );
}

/// Every request a lesson sends is one an instance with the default bounds accepts.
#[test]
fn every_phase_asks_for_knobs_within_the_default_bounds() {
    use clap::Parser;

    #[derive(Parser)]
    struct LimitsOnly {
        #[command(flatten)]
        limits: crate::config::Limits,
    }
    let limits = LimitsOnly::parse_from(["x"]).limits;
    for lesson in LESSONS {
        for phase in lesson.phases {
            let knobs = [Some(phase.knobs), phase.alternate, phase.first];
            for knobs in knobs.into_iter().flatten() {
                let knobs = knobs
                    .replace("{cart_reversed}", "101-b,101")
                    .replace("{cart}", "101,101-b");
                let params: Vec<(String, String)> = serde_urlencoded::from_str(&knobs).unwrap();
                let faults = matches!(lesson.needs, Needs::Faults | Needs::OrdersDbAndFaults);
                let (name, takes) = (phase.variant.name(), phase.variant.spec().knobs);
                let parsed = crate::knobs::Knobs::parse(name, takes, &params, &limits, faults);
                assert!(
                    parsed.is_ok(),
                    "{} {knobs}: {:?}",
                    lesson.name,
                    parsed.err()
                );
            }
        }
    }
}
