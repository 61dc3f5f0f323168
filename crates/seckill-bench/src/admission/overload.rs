//! Overload held: buyers arriving at ten times what `watchdog` with its work sells, through
//! a room letting half of that in (against the same room unloaded), and straight.

use std::time::Duration;

use seckill_load::arrivals::{Arrivals, Door};
use seckill_load::{Control, Load};
use serde_json::{Value, json};

use super::{OFFERED_FOR, OVERLOAD, Overload, PATIENCE, PRODUCT, ROUNDS, WORK_MS, client, median};
use crate::admin::Service;

/// What the room holds back under overload, and what the same arrivals meet without it.
pub(super) async fn overload(service: &Service<'_>) -> anyhow::Result<Overload> {
    let http = client(4_000)?;
    let units_per_s = watchdog_units_per_s(service, &http).await?;
    let room_rate = (units_per_s / 2.0).floor().max(1.0);
    let offered = units_per_s * OVERLOAD;
    let rounds = through_room(service, &http, room_rate, offered).await?;
    service
        .reset_body(json!({"product": PRODUCT, "stock": 1_000_000}))
        .await?;
    let straight = arrivals(service.base(), offered, OFFERED_FOR, "x")
        .once()
        .run(&http)
        .await;
    let statuses: serde_json::Map<String, Value> = [200, 409, 429, 503, 504]
        .iter()
        .map(|s| (s.to_string(), json!(straight.count("deduct", *s))))
        .filter(|(_, n)| n != &json!(0))
        .collect();
    Ok(Overload {
        watchdog_units_per_s: units_per_s,
        offered_per_s: offered,
        room_rate_per_s: room_rate,
        stock_side_per_s: median(rounds.stock_side),
        room_requests_per_s: median(rounds.answered),
        admitted_p99_ms: median(rounds.admitted),
        unloaded_p99_ms: median(rounds.unloaded),
        admitted_p50_ms: median(rounds.admitted_p50),
        unloaded_p50_ms: median(rounds.unloaded_p50),
        straight_statuses: Value::Object(statuses),
        straight_p99_ms: straight.deduction_ms(0.99),
    })
}

/// The variant the buyers buy: `watchdog` with [`WORK_MS`] of work in the lock.
fn working_watchdog() -> String {
    format!("watchdog?work_ms={WORK_MS}")
}

/// What `watchdog` with its work sells at 200 connections, units/s (on a fresh stock).
async fn watchdog_units_per_s(
    service: &Service<'_>,
    http: &reqwest::Client,
) -> anyhow::Result<f64> {
    service
        .reset_body(json!({"product": PRODUCT, "stock": 1_000_000}))
        .await?;
    let url = format!(
        "{}/deduct_stock/{}&product={PRODUCT}",
        service.base(),
        working_watchdog()
    );
    let measured = Load::post(url)
        .requests(2_000)
        .concurrency(200)
        .run(http, &Control::default())
        .await;
    Ok(measured.count(200) as f64 / measured.elapsed.as_secs_f64().max(1e-9))
}

/// Buyers arriving at `per_s` for `over`, each waiting up to [`PATIENCE`].
fn arrivals(base: &str, per_s: f64, over: Duration, prefix: &str) -> Arrivals {
    let buyers = ((per_s * over.as_secs_f64()) as usize).clamp(1, 8_000);
    Arrivals::new(base, PRODUCT, &working_watchdog())
        .buyers(buyers, over)
        .patience(PATIENCE)
        .named(prefix)
}

/// The runs through the room, a figure per round.
#[derive(Default)]
struct Rounds {
    /// Deduction requests a second reaching the stock (loaded).
    stock_side: Vec<f64>,
    /// Tickets and polls a second the room answered (loaded).
    answered: Vec<f64>,
    /// The admitted buyers' deduction p99 and p50, ms, loaded.
    admitted: Vec<f64>,
    admitted_p50: Vec<f64>,
    /// The same, unloaded.
    unloaded: Vec<f64>,
    unloaded_p50: Vec<f64>,
}

/// [`ROUNDS`] rounds through a room letting `room_rate` buyers a second in: buyers
/// arriving at that rate (unloaded), then at `offered` (loaded).
async fn through_room(
    service: &Service<'_>,
    http: &reqwest::Client,
    room_rate: f64,
    offered: f64,
) -> anyhow::Result<Rounds> {
    let base = service.base();
    let room = json!({"product": PRODUCT, "stock": 1_000_000,
        "waiting_room": {"rate_per_s": room_rate as u32, "pass_ttl_ms": 5_000}});
    // As often as the room says (every 5 s, then at the buyer's turn).
    let door = Door::Room {
        poll_every: Duration::from_secs(5),
    };
    let mut rounds = Rounds::default();
    // The room lets buyers in from the opening on; the first half second and the tail
    // after the arrivals' patience are left out.
    let window = (
        Duration::from_millis(500),
        PATIENCE - Duration::from_millis(500),
    );
    for round in 0..ROUNDS {
        service.reset_body(room.clone()).await?;
        // As many deductions as the loaded run's, for a p99 as steady.
        let calm = arrivals(base, room_rate, PATIENCE, &format!("u{round}-"))
            .door(door)
            .run(http)
            .await;
        rounds.unloaded.push(calm.deduction_ms(0.99));
        rounds.unloaded_p50.push(calm.deduction_ms(0.5));
        service.reset_body(room.clone()).await?;
        let loaded = arrivals(base, offered, OFFERED_FOR, &format!("l{round}-"))
            .door(door)
            .run(http)
            .await;
        rounds
            .stock_side
            .push(loaded.deduction_rate(window.0, window.1));
        rounds.admitted.push(loaded.deduction_ms(0.99));
        rounds.admitted_p50.push(loaded.deduction_ms(0.5));
        let room_requests: usize = ["ticket", "poll"]
            .iter()
            .flat_map(|step| [200, 409].map(|status| loaded.count(step, status)))
            .sum();
        rounds
            .answered
            .push(room_requests as f64 / loaded.elapsed.as_secs_f64().max(1e-9));
    }
    Ok(rounds)
}
