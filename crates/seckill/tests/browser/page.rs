//! The lock timeline, the side by side table and the page in Chinese, in Chromium, through
//! Nginx in front of two instances.

use std::time::Duration;

use seckill_testkit::{Api, Postgres, heavy_turn, int, root};
use serde_json::{Value, json};

use super::{Browser, behind_nginx, behind_nginx_with};

/// Starts `lesson` from its button and waits until the page says it is done and has read
/// the timeline since.
pub(crate) async fn run_lesson(browser: &Browser, lesson: &str) {
    browser
        .until(
            &format!("return !!document.querySelector('#lesson-{lesson}:not([disabled])')"),
            Duration::from_secs(10),
            "the lesson's button",
        )
        .await;
    browser.click(&format!("#lesson-{lesson}")).await;
    // A short lesson may be over before the page first hears from the instance running it
    // (behind Nginx, every other status poll reaches the other instance): "done" counts,
    // and the page says "starting" until then, so it is this lesson's.
    browser
        .until(
            "return ['running', 'done'].includes(document.querySelector('#lesson-status').dataset.state)",
            Duration::from_secs(10),
            &format!("the {lesson} lesson to start"),
        )
        .await;
    browser
        .until(
            "return document.querySelector('#lesson-status').dataset.state === 'done' && !Timeline.isLive()",
            Duration::from_secs(90),
            &format!("the {lesson} lesson to finish and its timeline to freeze"),
        )
        .await;
}

/// Scrolls the figures and the timeline to the top of the window, for a screenshot.
async fn show_timeline(browser: &Browser) {
    browser
        .run("document.querySelector('#figures').closest('section').scrollIntoView(); return true")
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// What the timeline drew: every section, as the page built it.
async fn sections(browser: &Browser) -> Vec<Value> {
    let drawn = browser
        .run("return Timeline.sections().map(s => ({ holder: s.holder, instance: s.instance, enter: s.enter, leave: s.leave, waited: s.waited, red: s.red, overlap: !!s.overlap, renewals: s.renewals.length, shard: s.shard }))")
        .await;
    drawn.as_array().cloned().unwrap_or_default()
}

/// The page's side by side table, row by row: `{lesson, sold, oversold, lost_updates,
/// lock_overlaps}`.
pub(crate) async fn table(browser: &Browser) -> Vec<Value> {
    let rows = browser
        .run(
            "return [...document.querySelectorAll('#results tbody tr:not(.door)')].map(tr => ({ lesson: tr.dataset.lesson, \
             sold: +tr.querySelector('[data-col=sold]').textContent, \
             oversold: +tr.querySelector('[data-col=oversold]').textContent, \
             lost_updates: +tr.querySelector('[data-col=lost_updates]').textContent, \
             lock_overlaps: +tr.querySelector('[data-col=lock_overlaps]').textContent }))",
        )
        .await;
    rows.as_array().cloned().unwrap_or_default()
}

/// The last row of `lesson` in the table equals `/stats` now (its last phase's end).
async fn last_row_equals_stats(browser: &Browser, lesson: &str, stats: &Value) {
    let rows = table(browser).await;
    let row = rows
        .iter()
        .rev()
        .find(|r| r["lesson"] == lesson)
        .unwrap_or_else(|| panic!("a row for {lesson} in {rows:?}"));
    for field in ["sold", "oversold", "lost_updates", "lock_overlaps"] {
        assert_eq!(
            row[field].as_i64(),
            Some(int(stats, field)),
            "{lesson}'s {field} in the side by side table, against /stats {stats}"
        );
    }
}

/// The token, watchdog and fair lessons from their buttons. Token: at least two red bars
/// overlap on the timeline, and its count of entries with another holder inside equals
/// `/stats`' overlaps. Watchdog: no red bar, renewals drawn. Fair: the last phase's bars,
/// on both instances, entered in the order their buyers arrived. The side by side table
/// has a row per phase, the last of each lesson equal to `/stats`. No console errors;
/// screenshots at 1280x720 (the token lesson's timeline, `run/page-token.png`) and at a phone's width.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_draws_overlaps_red_and_the_fair_lock_in_arrival_order() {
    let _turn = heavy_turn().await;
    let (_redis, _instances, nginx) = behind_nginx();
    let Some(browser) = Browser::start(1280, 720).await else {
        eprintln!(
            "SKIPPED timeline_draws_overlaps_red_and_the_fair_lock_in_arrival_order: no Chromium/chromedriver"
        );
        return;
    };
    let api = Api::new(&nginx.url(""));
    browser.open(&nginx.url("/")).await;

    // token: the lease runs out under its holder; the next one gets in.
    run_lesson(&browser, "token").await;
    let stats = api.stats("101").await;
    let drawn = sections(&browser).await;
    let red = drawn.iter().filter(|s| s["red"] == true).count();
    assert!(red >= 2, "at least two overlapping bars in red: {drawn:?}");
    let overlaps = int(&stats, "lock_overlaps");
    assert!(overlaps > 0, "the token lesson overlaps: {stats}");
    let counted = browser
        .run("return Number(document.querySelector('#timeline-overlaps').textContent)")
        .await;
    assert_eq!(
        counted,
        json!(overlaps),
        "the timeline's overlaps, against /stats"
    );
    browser
        .until(
            &format!("return Number(document.querySelector('[data-field=lock_overlaps] b').textContent) === {overlaps}"),
            Duration::from_secs(5),
            "the overlaps figure to equal /stats",
        )
        .await;
    last_row_equals_stats(&browser, "token", &stats).await;
    let root = root();
    show_timeline(&browser).await;
    browser.screenshot(&root.join("run/page-token.png")).await;

    // watchdog: the same terms, the lease renewed.
    run_lesson(&browser, "watchdog").await;
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "lock_overlaps"), 0, "{stats}");
    let drawn = sections(&browser).await;
    assert!(
        drawn.len() >= 3,
        "the watchdog lesson's sections: {drawn:?}"
    );
    assert!(
        drawn.iter().all(|s| s["red"] == false),
        "no red bar: {drawn:?}"
    );
    assert!(
        drawn.iter().any(|s| s["renewals"].as_u64() > Some(0)),
        "renewals drawn: {drawn:?}"
    );
    last_row_equals_stats(&browser, "watchdog", &stats).await;

    // fair: the last phase (its reset cleared the stream: /trace has it alone).
    run_lesson(&browser, "fair").await;
    let stats = api.stats("101").await;
    let (_, trace) = api.get("/trace?product=101").await;
    let fair_started = trace["events"][0]["at"]
        .as_u64()
        .expect("the fair phase's events");
    let mut fair: Vec<Value> = sections(&browser)
        .await
        .into_iter()
        .filter(|s| s["enter"].as_u64() >= Some(fair_started))
        .collect();
    fair.sort_by_key(|s| s["enter"].as_u64());
    assert!(fair.len() >= 10, "the fair phase's sections: {fair:?}");
    let instances: std::collections::BTreeSet<_> =
        fair.iter().map(|s| s["instance"].to_string()).collect();
    assert!(instances.len() == 2, "bars on both instances: {fair:?}");
    // Arrival: when the buyer began to wait. The phase's four buyers arrive at once (on
    // two instances, they reach Redis's queue in an order their clocks cannot tell, by as
    // much as a busy machine delays one of them); each later one arrives when a holder
    // leaves, half a second of work after the one before. So, without a tolerance: the
    // first four in are the first four to arrive, in any order, and every later one
    // enters in the order it arrived.
    let arrivals: Vec<i64> = fair
        .iter()
        .map(|s| s["enter"].as_i64().unwrap() - s["waited"].as_i64().expect("a wait"))
        .collect();
    const AT_ONCE: usize = 4;
    let mut by_arrival = arrivals.clone();
    by_arrival.sort_unstable();
    let mut first_in = arrivals[..AT_ONCE].to_vec();
    first_in.sort_unstable();
    assert_eq!(
        first_in,
        by_arrival[..AT_ONCE],
        "the first four in are the four who arrived at once: arrivals {arrivals:?}"
    );
    assert!(
        arrivals[AT_ONCE..].is_sorted(),
        "every later buyer entered in arrival order: arrivals {arrivals:?}"
    );
    last_row_equals_stats(&browser, "fair", &stats).await;
    let rows = table(&browser).await;
    let lessons: Vec<&str> = rows.iter().filter_map(|r| r["lesson"].as_str()).collect();
    assert_eq!(
        lessons,
        ["token", "watchdog", "fair", "fair"],
        "a row per phase run"
    );

    browser.assert_no_errors().await;
    browser
        .phone_screenshot(&root.join("run/page-phone-timeline.png"))
        .await;
    browser.quit().await;
}

/// In a browser whose language is zh-CN the page is in Chinese: both string tables have
/// the same keys and every Chinese string differs from its English one; every label, figure
/// and lesson button shows its Chinese string; the toggle turns the page to English and
/// back. The token lesson's timeline, in Chinese, is the screenshot `run/page-token-zh.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_in_chinese_leaves_no_english_label() {
    let _turn = heavy_turn().await;
    let (_redis, _instances, nginx) = behind_nginx();
    let Some(browser) = Browser::start_in(1280, 720, Some("zh-CN")).await else {
        eprintln!("SKIPPED page_in_chinese_leaves_no_english_label: no Chromium/chromedriver");
        return;
    };
    browser.open(&nginx.url("/")).await;
    browser
        .until(
            "return !!document.querySelector('#lesson-token')",
            Duration::from_secs(10),
            "the lesson buttons",
        )
        .await;
    assert_eq!(
        browser.run("return LANG").await,
        json!("zh"),
        "chosen from the browser's language"
    );

    let untranslated = browser
        .run(
            "const en = Object.keys(STRINGS.en), zh = Object.keys(STRINGS.zh); \
             return { missing: en.filter(k => !(k in STRINGS.zh)).concat(zh.filter(k => !(k in STRINGS.en))), \
                      same: en.filter(k => STRINGS.zh[k] === STRINGS.en[k]) }",
        )
        .await;
    assert_eq!(
        untranslated,
        json!({ "missing": [], "same": [] }),
        "the string tables"
    );

    // Every string on the page now: the labels, the figures, the lessons.
    let check = "const wrong = []; \
         for (const el of document.querySelectorAll('[data-i18n]')) \
           if (el.textContent !== STRINGS[LANG][el.dataset.i18n]) wrong.push(el.dataset.i18n + ': ' + el.textContent); \
         for (const el of document.querySelectorAll('.figure span')) \
           if (el.textContent !== STRINGS[LANG]['f-' + el.parentNode.dataset.field]) wrong.push(el.textContent); \
         for (const b of document.querySelectorAll('#lessons [data-lesson]')) { \
           const l = lessons.find(l => l.name === b.dataset.lesson); \
           if (!b.textContent.startsWith(LANG === 'zh' ? l.title_zh : l.title)) wrong.push(b.textContent); } \
         return wrong";

    // Start a lesson so that the figures are drawn, then look.
    run_lesson(&browser, "token").await;
    assert_eq!(
        browser.run(check).await,
        json!([]),
        "strings not in Chinese"
    );
    assert!(
        browser
            .run("return document.querySelector('#watch').textContent")
            .await
            .as_str()
            .is_some_and(|watch| watch.contains("过期")),
        "the lesson's paragraph in Chinese"
    );
    show_timeline(&browser).await;
    browser
        .screenshot(&root().join("run/page-token-zh.png"))
        .await;

    browser.click("#language").await;
    assert_eq!(browser.run("return LANG").await, json!("en"));
    assert_eq!(
        browser.run(check).await,
        json!([]),
        "strings not in English"
    );
    let plan = "return document.querySelector('#plan').getAttribute('href')";
    assert_eq!(
        browser.run(plan).await,
        json!("/book/teaching"),
        "the plan in English"
    );
    browser.click("#language").await;
    assert_eq!(
        browser.run(check).await,
        json!([]),
        "strings not in Chinese again"
    );

    browser.assert_no_errors().await;
    // The lesson plan, in the page's language, from the book the instance serves.
    assert_eq!(
        browser.run(plan).await,
        json!("/book/teaching.zh-CN"),
        "the plan in Chinese"
    );
    browser.open(&nginx.url("/book/teaching.zh-CN")).await;
    assert_eq!(
        browser
            .run("return [document.documentElement.lang, document.querySelector('h1').textContent.length > 0, document.querySelectorAll('h2').length > 5]")
            .await,
        json!(["zh-CN", true, true]),
        "the Chinese plan, served"
    );
    browser.quit().await;
}

/// Seed 003's first row on the page, in Chinese: the pg_locks lesson from its button. The
/// unique-key lock's dead holder sells nothing (every buyer 429); the advisory lock's dead
/// holder frees it with its connection (the stock sells); the row with a lease is taken
/// over after it. Each phase is a row of the side by side table, the last equal to
/// `/stats`; the lesson's paragraph is in Chinese; no console errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_locks_lesson_shows_the_database_deadlock_in_chinese() {
    let _turn = heavy_turn().await;
    let db = Postgres::start();
    let url = db.url();
    let (_redis, _instances, nginx) = behind_nginx_with(&["--orders-db", &url, "--faults"]);
    let Some(browser) = Browser::start_in(1280, 720, Some("zh-CN")).await else {
        eprintln!(
            "SKIPPED pg_locks_lesson_shows_the_database_deadlock_in_chinese: no Chromium/chromedriver"
        );
        return;
    };
    let api = Api::new(&nginx.url(""));
    browser.open(&nginx.url("/")).await;
    run_lesson(&browser, "pg_locks").await;
    let rows = table(&browser).await;
    let sold: Vec<i64> = rows
        .iter()
        .filter(|r| r["lesson"] == "pg_locks")
        .map(|r| r["sold"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(
        sold,
        [0, 10, 10],
        "unique key deadlocked, advisory freed, lease taken over: {rows:?}"
    );
    last_row_equals_stats(&browser, "pg_locks", &api.stats("101").await).await;
    let watch = browser
        .run("return document.querySelector('#watch').textContent")
        .await;
    assert!(
        watch.as_str().is_some_and(|w| w.contains("咨询锁")),
        "the lesson's paragraph in Chinese: {watch}"
    );
    browser.assert_no_errors().await;
    browser.quit().await;
}
