//! The front door's lesson: buyers arriving in a known order, straight to the stock and
//! then through a waiting room; and the sold-out flag that outlives a unit's return.

use std::time::Duration;

use crate::lesson::{Flag, Lesson, Needs, Opening, Phase, Room, phase};
use crate::service::Service;
use crate::status::{Arrived, DoorResult, PhaseResult};
use seckill_load::arrivals::{Arrivals, Door, Journey};

const WATCHDOG: &str = "watchdog";
const LUA: &str = "lua";

/// A room letting 10 buyers in a second, each pass good for 5 s.
const ROOM: Opening = Opening {
    room: Some(Room {
        rate_per_s: 10,
        pass_ttl_ms: 5_000,
    }),
    flag: Flag::Off,
};

/// A sale whose flag is `flag`, with reservations that expire unpaid after 300 ms.
const fn flagged(label: &'static str, flag: Flag) -> Phase {
    Phase {
        door: Opening { room: None, flag },
        pay_within_ms: 300,
        ..phase(label, 20, 1, LUA, "", 2_000, 20)
    }
}

pub(crate) const WAITING_ROOM: Lesson = Lesson {
    name: "waiting_room",
    title: "the front door: a waiting room, and a sold-out flag nobody cleared",
    title_zh: "入口：排队等候室，以及没人清除的售罄标记",
    watch: "100 buyers arrive in a known order within one second for 10 units of watchdog \
            with 20 ms of work. Straight to the stock, whoever's retry reaches the lock \
            first wins: the first 10 to arrive get only part of the units. Through a waiting \
            room letting 10 in a second, each buyer takes a number, waits its turn and buys \
            with a signed pass: the units go to the first 10, and everyone still waiting is \
            told it sold out at their next poll. Then the sold-out flag: reservations expire \
            unpaid and their units come back, and 20 latecomers ask; with the flag on, \
            every instance forgot it and sells them the units; with the demos' sticky flag, \
            the units stay unsold while the latecomers are told 409 (undersold).",
    watch_zh: "100 个买家在一秒内按已知顺序到达，抢看门狗变体的 10 件库存（锁内 20 毫秒业务）。 \
               直接冲库存时，谁的重试先抢到锁谁就赢：最先到的 10 个人只拿到一部分。经过每秒放行 10 人 \
               的排队等候室，每个买家先取号、等到号再凭签名通行证购买：库存都归最先到的 10 人，其余 \
               还在排队的人在下一次轮询时得知已售罄。然后是售罄标记：预占的订单超时未付，库存回来了， \
               又来了 20 个迟到的买家；标记为 on 时，每个实例都已忘掉它，把库存卖给他们；用演示项目 \
               常见的 sticky（不清除）标记，回来的库存一直卖不出去，迟到的买家却得到 409（少卖）。",
    phases: &[
        Phase {
            arrivals_over_ms: Some(1_000),
            ..phase(
                "straight, 100 buyers in 1 s",
                10,
                1,
                WATCHDOG,
                "work_ms=20&wait_ms=200",
                100,
                100,
            )
        },
        Phase {
            arrivals_over_ms: Some(1_000),
            door: ROOM,
            ..phase(
                "through the room, 10 a second",
                10,
                1,
                WATCHDOG,
                "work_ms=20&wait_ms=200",
                100,
                100,
            )
        },
        flagged("flag on, units come back", Flag::On),
        flagged("sticky flag, units come back", Flag::Sticky),
    ],
    needs: Needs::Nothing,
    failure_mode: false,
};

/// `phase.requests` buyers arriving over `over_ms` through `base`, each until served (or
/// for 3 s); their row.
pub(crate) async fn arrivals(
    phase: &Phase,
    product: &str,
    service: &impl Service,
    http: &reqwest::Client,
    base: &str,
    over_ms: u64,
) -> Result<Arrived, String> {
    let door = match phase.door.room {
        Some(_) => Door::Room {
            poll_every: Duration::from_millis(250),
        },
        None => Door::Straight,
    };
    let report = Arrivals::new(base, product, &phase.path())
        .buyers(phase.requests, Duration::from_millis(over_ms))
        .door(door)
        .patience(Duration::from_secs(3))
        .run(http)
        .await;
    let stats = service
        .audit(product)
        .await
        .map_err(|err| format!("stats: {err}"))?;
    let first = usize::try_from(phase.stock).unwrap_or(0);
    let admitted: Vec<Duration> = report.journeys.iter().filter_map(|j| j.admitted).collect();
    let span = match (admitted.iter().min(), admitted.iter().max()) {
        (Some(from), Some(to)) if to > from => to.saturating_sub(*from).as_secs_f64(),
        _ => 1.0,
    };
    let queue = longest_queue(&report.journeys);
    let mut statuses = std::collections::BTreeMap::new();
    for ((_, status), count) in &report.statuses {
        *statuses.entry(*status).or_default() += count;
    }
    let requests = statuses.values().sum();
    let door = DoorResult {
        first_share: report.bought_among_first(first) as f64 / report.bought().max(1) as f64,
        queue: if phase.door.room.is_some() { queue } else { 0 },
        admitted_per_s: admitted.len() as f64 / span,
        told_sold_out: report
            .journeys
            .iter()
            .filter(|j| j.told_sold_out.is_some())
            .count(),
        flagged: 0,
        undersold: stats.undersold,
        remaining: stats.remaining,
    };
    let (elapsed, p99_ms) = (report.elapsed, report.deduction_ms(0.99));
    let door = Some(door);
    let row = PhaseResult::of(
        WAITING_ROOM.name,
        phase,
        &stats,
        elapsed,
        p99_ms,
        requests,
        door,
    );
    Ok(Arrived {
        phase: row,
        statuses,
        requests,
    })
}

/// The most buyers who had arrived and were neither let in nor told, at any arrival.
fn longest_queue(journeys: &[Journey]) -> usize {
    journeys
        .iter()
        .map(|j| j.arrived)
        .map(|at| {
            journeys
                .iter()
                .filter(|o| o.arrived <= at)
                .filter(|o| o.admitted.is_none_or(|a| a > at))
                .filter(|o| o.told_sold_out.is_none_or(|t| t > at))
                .filter(|o| o.bought.is_none_or(|b| b > at))
                .count()
        })
        .max()
        .unwrap_or(0)
}
