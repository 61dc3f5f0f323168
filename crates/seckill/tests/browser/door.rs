//! The front door's lesson on the page, in Chinese.

use seckill_testkit::{Api, heavy_turn, int};
use serde_json::Value;

use crate::page::{run_lesson, table};
use crate::{Browser, behind_nginx_with};

/// The waiting room lesson from its button, on a Chinese browser: straight to the stock
/// the first 10 of 100 arrivals get part of the units; through the room they get them all
/// (the door's line says so); with the flag on, units given back by expired reservations
/// sell again; with the sticky flag they stay unsold while buyers are told 409 — the last
/// row equals `/stats` and its line counts the undersold units.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_room_lesson_shows_the_room_and_the_sticky_flag_in_chinese() {
    let _turn = heavy_turn().await;
    let (_redis, _instances, nginx) = behind_nginx_with(&["--expiry-sweep-ms", "50"]);
    let Some(browser) = Browser::start_in(1280, 720, Some("zh-CN")).await else {
        eprintln!(
            "SKIPPED waiting_room_lesson_shows_the_room_and_the_sticky_flag_in_chinese: no Chromium/chromedriver"
        );
        return;
    };
    let api = Api::new(&nginx.url(""));
    browser.open(&nginx.url("/")).await;
    run_lesson(&browser, "waiting_room").await;
    let rows = table(&browser).await;
    let sold: Vec<i64> = rows
        .iter()
        .filter(|r| r["lesson"] == "waiting_room")
        .map(|r| r["sold"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(sold.len(), 4, "a row per phase: {rows:?}");
    assert_eq!(
        &sold[..2],
        [10, 10],
        "the units sell, straight and through the room"
    );
    assert!(
        sold[2] > 20,
        "flag on: units that came back sold again: {sold:?}"
    );
    assert_eq!(
        sold[3], 20,
        "sticky flag: the units that came back never sold: {sold:?}"
    );
    let doors = browser
        .run(
            "return [...document.querySelectorAll('#results tbody tr.door')].map(tr => ({ \
             first_share: +tr.dataset.firstShare, told: +tr.dataset.told, \
             undersold: +tr.dataset.undersold, flagged: +tr.dataset.flagged, \
             text: tr.textContent }))",
        )
        .await;
    let doors: Vec<Value> = doors.as_array().cloned().unwrap_or_default();
    assert_eq!(doors.len(), 4, "{doors:?}");
    // Numbers go in the order the requests reach the room: buyers 10 ms apart may swap
    // on a loaded machine, and with 10 units one swap is a tenth (CI once read 0.9).
    let share = |i: usize| doors[i]["first_share"].as_f64().unwrap_or(-1.0);
    assert!(
        share(1) >= 0.8 && share(1) >= share(0),
        "the room keeps arrival order: {doors:?}"
    );
    assert!(
        doors[1]["told"].as_i64() >= Some(80),
        "the rest told sold out: {doors:?}"
    );
    assert_eq!(
        doors[2]["undersold"], 0,
        "flag on: the latecomers bought the units that came back: {doors:?}"
    );
    assert!(
        doors[3]["flagged"].as_i64() > Some(0) && doors[3]["undersold"] == 20,
        "the sticky flag turned the latecomers away with 20 units left: {doors:?}"
    );
    assert!(
        doors[3]["text"]
            .as_str()
            .is_some_and(|t| t.contains("少卖")),
        "the door's line in Chinese: {doors:?}"
    );
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "undersold"), 20, "{stats}");
    let watch = browser
        .run("return document.querySelector('#watch').textContent")
        .await;
    assert!(
        watch.as_str().is_some_and(|w| w.contains("排队等候室")),
        "the lesson's paragraph in Chinese: {watch}"
    );
    browser.assert_no_errors().await;
    browser.quit().await;
}
