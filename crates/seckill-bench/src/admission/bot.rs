//! The bot against its rate limit: one buyer clicking 1,000 times a second beside 50 who
//! click 4 times a second each.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::{
    BOT_CLICKS_PER_S, Bot, LIMIT_PER_S, OFFERED_FOR, OTHER_CLICKS_PER_S, OTHERS, PRODUCT, ROUNDS,
    client, median, ms,
};
use crate::admin::Service;

pub(super) async fn bot(service: &Service<'_>) -> anyhow::Result<Bot> {
    let http = client(400)?;
    let base = service.base().to_owned();
    service
        .reset_body(json!({"product": PRODUCT, "stock": 1_000_000,
            "rate_limit": {"per_s": LIMIT_PER_S}}))
        .await?;
    let (mut without, mut with, mut through) = (vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        without.push(clicks(&http, &base, false).await.0);
        let (p99, bot) = clicks(&http, &base, true).await;
        with.push(p99);
        through = bot;
    }
    let (without, with) = (median(without), median(with));
    let steady = through
        .iter()
        .filter(|at| **at >= Duration::from_secs(1))
        .count();
    Ok(Bot {
        through_per_s: steady as f64 / (OFFERED_FOR.as_secs_f64() - 1.0),
        through: through.len(),
        others_p99_without_ms: without,
        others_p99_with_ms: with,
    })
}

/// The others' clicks for [`OFFERED_FOR`] (and the bot's, with `bot`): the others' p99, ms,
/// and when the bot's clicks answered other than 429 were sent.
async fn clicks(http: &reqwest::Client, base: &str, bot: bool) -> (f64, Vec<Duration>) {
    let started = Instant::now();
    let until = started + OFFERED_FOR;
    let mut others = Vec::new();
    for i in 0..OTHERS {
        let (http, url) = (
            http.clone(),
            format!("{base}/deduct_stock/lua?product={PRODUCT}&user=o{i}"),
        );
        let every = Duration::from_millis(1_000 / OTHER_CLICKS_PER_S);
        let first = every.mul_f64(i as f64 / OTHERS as f64);
        others.push(tokio::spawn(async move {
            let mut took = Vec::new();
            let mut next = started + first;
            while next < until {
                tokio::time::sleep_until(next).await;
                let sent = Instant::now();
                if http.post(&url).send().await.is_ok() {
                    took.push(sent.elapsed());
                }
                next += every;
            }
            took
        }));
    }
    let mut through = Vec::new();
    if bot {
        let url = format!("{base}/deduct_stock/lua?product={PRODUCT}&user=bot");
        let every = Duration::from_micros(1_000_000 / BOT_CLICKS_PER_S);
        let mut clicks = Vec::new();
        let mut next = started;
        while next < until {
            tokio::time::sleep_until(next).await;
            let (http, url) = (http.clone(), url.clone());
            let at = next - started;
            clicks.push(tokio::spawn(async move {
                (
                    at,
                    http.post(&url).send().await.map(|r| r.status().as_u16()),
                )
            }));
            next += every;
        }
        for click in clicks {
            if let Ok((at, Ok(status))) = click.await
                && status != 429
            {
                through.push(at);
            }
        }
    }
    let mut took: Vec<Duration> = Vec::new();
    for other in others {
        took.extend(other.await.unwrap_or_default());
    }
    took.sort();
    let p99 = took
        .get((took.len() * 99 / 100).min(took.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default();
    (ms(p99), through)
}
