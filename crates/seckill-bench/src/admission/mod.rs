//! The front door, measured (`--suite admission`): what a waiting room, a per-buyer rate
//! limit and the sold-out flag buy, each against the same load without them, in one run.
//!
//! 1. **Fairness** — 2,000 buyers arriving in a known order over 2 s for 200 units of
//!    `watchdog` with 5 ms of work (it sells about 150 a second, so buyers queue at the
//!    lock): the share of the units sold that went to the first 200 to arrive, buyers
//!    going straight to the deduction (and clicking again while told the lock was busy),
//!    then through a room letting 100 a second in.
//! 2. **Sold out told** — in that room run: from the last unit sold to the last buyer
//!    still waiting told so, against their poll interval + 100 ms.
//! 3. **Overload held** — `watchdog` with 5 ms of work sells W units/s at 200 connections;
//!    buyers arrive at 10 W a second for 3 s. Through a room letting W/2 a second in: the
//!    stock side's request rate against the room's rate, and the admitted buyers' p99
//!    against the same room at an offered load of W/2 (unloaded), medians of three rounds.
//!    Straight: what the same arrivals are answered (503s, 429s) and their p99.
//! 4. **The flag** — Redis commands per 409 after the sell-out, with `sold_out_flag: on`
//!    and off (Redis's own `INFO` counters).
//! 5. **A bot** — one buyer clicking 1,000 times a second for 3 s with a limit of 5 a
//!    second: its tries through per second once its burst is spent (after the first
//!    second), and the p99 of 50 other buyers (4 clicks a second each) with the bot
//!    against without it.

use std::fmt::Write as _;
use std::time::Duration;

use seckill_load::arrivals::{Arrivals, ArrivalsReport, Door};
use seckill_load::{Control, Load};
use serde::Serialize;
use serde_json::{Value, json};

mod bot;
mod overload;

use crate::admin::Service;
use crate::redis_usage::{Masters, spent};

/// The suite's product (its own, so the bench's `--product` is left as found).
const PRODUCT: &str = "bench-admission";

/// The fairness run: buyers, units, the spread of their arrivals, the room's rate.
const BUYERS: usize = 2_000;
const UNITS: i64 = 200;
const ARRIVALS_OVER: Duration = Duration::from_secs(2);
const ROOM_RATE: u32 = 100;
/// How often a waiting buyer polls at most (the room may say sooner).
const POLL_EVERY: Duration = Duration::from_millis(500);

/// The overload runs: work in the lock, how much more is offered than `watchdog` sells,
/// for how long.
const WORK_MS: u64 = 5;
const OVERLOAD: f64 = 10.0;
const OFFERED_FOR: Duration = Duration::from_secs(3);
/// How long an arriving buyer waits for the room at most (the loaded run's buyers are let
/// in for this long after the opening).
const PATIENCE: Duration = Duration::from_secs(10);

/// The overload's and the bot's p99s move by half from run to run on a shared 2-core
/// machine: each comparison is made this many times, alternating, and the medians kept.
const ROUNDS: usize = 3;

/// The bot: its clicks a second, its limit, the others and their clicks a second.
const BOT_CLICKS_PER_S: u64 = 1_000;
const LIMIT_PER_S: u32 = 5;
const OTHERS: usize = 50;
const OTHER_CLICKS_PER_S: u64 = 4;

/// Everything the suite measured.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub fairness: Fairness,
    pub overload: Overload,
    pub flag: Flag,
    pub bot: Bot,
}

#[derive(Debug, Clone, Serialize)]
pub struct Fairness {
    /// Share of the units sold that went to the first 200 arrivals.
    pub straight: f64,
    pub through_room: f64,
    pub sold_straight: usize,
    pub sold_through_room: usize,
    /// From the last unit sold to the last buyer still waiting told, ms.
    pub told_after_ms: f64,
    /// Their poll interval + 100 ms: the target.
    pub told_target_ms: f64,
    /// Buyers still waiting at the last sale (told at a poll).
    pub told: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Overload {
    /// `watchdog`'s units/s at 200 connections with the work.
    pub watchdog_units_per_s: f64,
    pub offered_per_s: f64,
    pub room_rate_per_s: f64,
    /// Deduction requests a second reaching the stock through the room.
    pub stock_side_per_s: f64,
    /// Tickets and polls a second the room answered meanwhile.
    pub room_requests_per_s: f64,
    pub admitted_p99_ms: f64,
    pub unloaded_p99_ms: f64,
    pub admitted_p50_ms: f64,
    pub unloaded_p50_ms: f64,
    /// Without the room, the same arrivals: answers and p99.
    pub straight_statuses: Value,
    pub straight_p99_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Flag {
    pub commands_per_409_on: Option<f64>,
    pub commands_per_409_off: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Bot {
    /// The bot's answers other than 429 a second, after the first second (its burst), in
    /// the last round.
    pub through_per_s: f64,
    /// Its answers other than 429 in the whole run, burst included.
    pub through: usize,
    pub others_p99_without_ms: f64,
    pub others_p99_with_ms: f64,
}

/// Runs the suite.
pub async fn run(service: &Service<'_>, masters: &mut Option<Masters>) -> anyhow::Result<Figures> {
    let fairness = fairness(service).await?;
    let overload = overload::overload(service).await?;
    let flag = flag(service, masters).await?;
    let bot = bot::bot(service).await?;
    Ok(Figures {
        fairness,
        overload,
        flag,
        bot,
    })
}

pub(crate) fn client(connections: usize) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_secs(30))
        .build()?)
}

async fn fairness(service: &Service<'_>) -> anyhow::Result<Fairness> {
    let http = client(BUYERS)?;
    let base = service.base();
    let variant = format!("watchdog?work_ms={WORK_MS}");
    let buyers = |door, prefix| {
        Arrivals::new(base, PRODUCT, &variant)
            .buyers(BUYERS, ARRIVALS_OVER)
            .door(door)
            .patience(Duration::from_secs(15))
            .named(prefix)
    };
    service
        .reset_body(json!({"product": PRODUCT, "stock": UNITS}))
        .await?;
    let straight = buyers(Door::Straight, "s").run(&http).await;
    let room = json!({"rate_per_s": ROOM_RATE, "pass_ttl_ms": 5_000});
    service
        .reset_body(json!({"product": PRODUCT, "stock": UNITS, "waiting_room": room}))
        .await?;
    let door = Door::Room {
        poll_every: POLL_EVERY,
    };
    let through = buyers(door, "r").run(&http).await;
    let share = |report: &ArrivalsReport| {
        report.bought_among_first(UNITS as usize) as f64 / report.bought().max(1) as f64
    };
    let last_sale = through.last_sale().unwrap_or_default();
    let waiting: Vec<_> = through
        .journeys
        .iter()
        .filter(|j| j.arrived < last_sale && j.bought.is_none())
        .filter_map(|j| Some((j.told_sold_out?, j.polling_every.unwrap_or(POLL_EVERY))))
        .collect();
    let told_after = waiting
        .iter()
        .map(|(told, _)| told.saturating_sub(last_sale))
        .max()
        .unwrap_or_default();
    let interval = waiting
        .iter()
        .map(|(_, every)| *every)
        .max()
        .unwrap_or(POLL_EVERY);
    Ok(Fairness {
        straight: share(&straight),
        through_room: share(&through),
        sold_straight: straight.bought(),
        sold_through_room: through.bought(),
        told_after_ms: ms(told_after),
        told_target_ms: ms(interval) + 100.0,
        told: waiting.len(),
    })
}

async fn flag(service: &Service<'_>, masters: &mut Option<Masters>) -> anyhow::Result<Flag> {
    let http = client(100)?;
    let url = format!("{}/deduct_stock/lua?product={PRODUCT}", service.base());
    let mut per_409 = Vec::new();
    for flag in ["on", "off"] {
        service
            .reset_body(json!({"product": PRODUCT, "stock": 100, "sold_out_flag": flag}))
            .await?;
        let sell_out = Load::post(url.clone()).requests(200).concurrency(50);
        sell_out.run(&http, &Control::default()).await;
        // Every instance has seen it sold out (Nginx spreads the 100 answers after it).
        let Some(masters) = masters.as_mut() else {
            per_409.push(None);
            continue;
        };
        let before = masters.read().await?;
        let refused = Load::post(url.clone()).requests(4_000).concurrency(50);
        let report = refused.run(&http, &Control::default()).await;
        let after = masters.read().await?;
        let commands: u64 = spent(&before, &after).iter().map(|(_, c, _)| c).sum();
        per_409.push(Some(commands as f64 / report.count(409).max(1) as f64));
    }
    Ok(Flag {
        commands_per_409_on: per_409[0],
        commands_per_409_off: per_409[1],
    })
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

pub(crate) fn ms(time: Duration) -> f64 {
    time.as_secs_f64() * 1_000.0
}

/// The suite's findings as the docs' admission chapter shows them, each beside its target.
pub fn render(figures: &Figures) -> String {
    let Figures {
        fairness: f,
        overload: o,
        flag,
        bot,
    } = figures;
    let mut out = String::from("front door (admission):\n");
    let _ = writeln!(
        out,
        "  fairness (units to the first {UNITS} of {BUYERS} arrivals): straight {:.2} ({} sold), \
         through the room {:.2} ({} sold; target >= 0.95)",
        f.straight, f.sold_straight, f.through_room, f.sold_through_room
    );
    let _ = writeln!(
        out,
        "  sold out told: {:.0} ms after the last sale to the last of {} waiting \
         (target <= {:.0} ms: their poll interval + 100 ms)",
        f.told_after_ms, f.told, f.told_target_ms
    );
    let _ = writeln!(
        out,
        "  overload: watchdog (work {WORK_MS} ms) sells {:.0} units/s; {:.0} buyers/s offered; \
         room {:.0}/s answering {:.0} tickets and polls/s: stock side {:.0} req/s ({:.2}x \
         the room's rate, target <= 1.1x), \
         admitted p99 {:.1} ms against {:.1} ms unloaded ({:.2}x, target <= 2x; p50 {:.1} \
         against {:.1} ms); straight: \
         {} and p99 {:.1} ms",
        o.watchdog_units_per_s,
        o.offered_per_s,
        o.room_rate_per_s,
        o.room_requests_per_s,
        o.stock_side_per_s,
        o.stock_side_per_s / o.room_rate_per_s.max(1e-9),
        o.admitted_p99_ms,
        o.unloaded_p99_ms,
        o.admitted_p99_ms / o.unloaded_p99_ms.max(1e-9),
        o.admitted_p50_ms,
        o.unloaded_p50_ms,
        o.straight_statuses,
        o.straight_p99_ms
    );
    let per = |v: Option<f64>| {
        v.map_or("not read (give --redis-url)".to_owned(), |v| {
            format!("{v:.3}")
        })
    };
    let _ = writeln!(
        out,
        "  Redis commands per 409 after the sell-out: flag on {}, off {} (target 0 with the flag)",
        per(flag.commands_per_409_on),
        per(flag.commands_per_409_off)
    );
    let _ = writeln!(
        out,
        "  bot at {BOT_CLICKS_PER_S} clicks/s, limit {LIMIT_PER_S}/s: {} tries through in {} s, \
         {:.1}/s after its burst (target <= {LIMIT_PER_S}); others' p99 {:.1} ms with it, \
         {:.1} ms without ({:+.0} %, target within 10 %)",
        bot.through,
        OFFERED_FOR.as_secs(),
        bot.through_per_s,
        bot.others_p99_with_ms,
        bot.others_p99_without_ms,
        (bot.others_p99_with_ms / bot.others_p99_without_ms.max(1e-9) - 1.0) * 100.0
    );
    out
}
