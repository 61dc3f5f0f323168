//! The lessons' bounds (each bounded, found by name), and the runner against a service
//! that refuses. What needs the service's registries (the variants, their knobs) is tested
//! in the service (`seckill::lessons`).

use std::time::Duration;

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
            assert!(!phase.variant.is_empty(), "{}", lesson.name);
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

#[test]
fn a_phase_path_is_its_variant_and_knobs() {
    let naive = &find("naive").unwrap().phases[0];
    assert_eq!(naive.path(), "naive?work_ms=2");
    let lua = &find("lua").unwrap().phases[0];
    assert_eq!(lua.path(), "lua");
    assert_eq!(second_product("101"), "101-b");
}

/// A service that has nothing, or everything, and whose resets fail.
#[derive(Clone)]
struct Refusing {
    has: bool,
}

impl Service for Refusing {
    fn has(&self, _: Needs) -> bool {
        self.has
    }

    async fn reset(&self, _: &Phase, product: &str) -> Result<(), String> {
        Err(format!("reset: no product {product} here"))
    }

    async fn close(&self, _: &str) -> Result<(), String> {
        Ok(())
    }

    async fn audit(&self, _: &str) -> Result<Audit, String> {
        Ok(Audit::default())
    }

    async fn pay(&self, _: &str, _: &str) -> Result<(), String> {
        Ok(())
    }

    fn flush_every(&self) -> Duration {
        Duration::ZERO
    }
}

#[tokio::test]
async fn a_lesson_starts_only_where_it_can_and_says_why_it_stopped() {
    let lessons = Lessons::new("http://127.0.0.1:9/");
    assert!(lessons.status().is_none());
    let redlock = find("redlock").unwrap();
    let refused = lessons.start(redlock, "101", Refusing { has: false });
    assert_eq!(
        refused.unwrap_err().to_string(),
        "the redlock lesson needs instances started with --redlock-urls"
    );
    let started = lessons
        .start(redlock, "101", Refusing { has: true })
        .unwrap();
    assert!(started.running && started.lesson == "redlock" && started.product == "101");
    assert_eq!(started.total, 6);
    let mut status = lessons.status().unwrap();
    for _ in 0..100 {
        if !status.running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        status = lessons.status().unwrap();
    }
    assert!(!status.running);
    assert_eq!(status.error.as_deref(), Some("reset: no product 101 here"));
    assert_eq!(status.run, started.run);
}

#[tokio::test]
async fn one_lesson_at_a_time() {
    let lessons = Lessons::new("http://127.0.0.1:9");
    let naive = find("naive").unwrap();
    // A reset that never ends keeps the lesson running.
    #[derive(Clone)]
    struct Stalled;
    impl Service for Stalled {
        fn has(&self, _: Needs) -> bool {
            true
        }
        async fn reset(&self, _: &Phase, _: &str) -> Result<(), String> {
            std::future::pending().await
        }
        async fn close(&self, _: &str) -> Result<(), String> {
            Ok(())
        }
        async fn audit(&self, _: &str) -> Result<Audit, String> {
            Ok(Audit::default())
        }
        async fn pay(&self, _: &str, _: &str) -> Result<(), String> {
            Ok(())
        }
        fn flush_every(&self) -> Duration {
            Duration::ZERO
        }
    }
    lessons.start(naive, "101", Stalled).unwrap();
    let again = lessons.start(naive, "101", Stalled).unwrap_err();
    assert_eq!(
        again.to_string(),
        "a lesson is already running; cancel it first"
    );
    assert!(lessons.cancel().unwrap().cancelled);
}
