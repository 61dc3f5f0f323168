//! The checker's rule on keys that sold: a buyer whose order exists gets it for the key
//! that bought it. After the run, every key under which Redis holds an order is sent again
//! by its buyer, with its request (resent as a buyer's app resends: on no answer, 502,
//! 503, 504, 423), and must be answered 200 naming that order — not `423 in_flight` for
//! ever, not `403 limit_reached`, not `409`, not another order.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::buyers::{self, Click, History, told};
use crate::world::{Sale, World};

/// Keys asked again at once.
const ASKING: usize = 32;

/// One sale's keys as Redis holds them: its index in the world's sales, and key -> the
/// orders sold under it.
pub type SoldKeys = (usize, BTreeMap<String, Vec<String>>);

/// A key to ask again about: its sale, its buyer, the orders Redis holds under it.
struct Ask {
    sale: &'static Sale,
    user: String,
    key: String,
    sold: Vec<String>,
    during: String,
}

/// What asking again found.
pub struct Asked {
    /// Keys asked again, and the sends they took.
    pub keys: usize,
    pub sends: usize,
    /// The slowest key's time and what it was told (for the summary, never the verdict).
    pub slowest: (Duration, String),
    /// One for each key not answered its order.
    pub violations: Vec<String>,
}

/// Every key that sold asked again; a violation for each not answered its order.
pub async fn sold_keys_answer_their_order(
    world: &World,
    history: &History,
    sold: &[SoldKeys],
) -> Asked {
    let clicks: BTreeMap<&str, &Click> = history
        .clicks
        .iter()
        .filter_map(|c| Some((c.key.as_deref()?, c)))
        .collect();
    let mut violations = Vec::new();
    let mut asks = Vec::new();
    for (index, keys) in sold {
        let sale = &world.sales[*index];
        for (key, orders) in keys {
            match clicks.get(key.as_str()) {
                Some(click) if click.sale == *index => asks.push(Ask {
                    sale,
                    user: click.user.clone(),
                    key: key.clone(),
                    sold: orders.clone(),
                    during: told(&click.sends),
                }),
                _ => violations.push(format!(
                    "{}: key {key} sold {orders:?}, and no buyer clicked on it with that key",
                    sale.product
                )),
            }
        }
    }
    let asked = asks.len();
    let (http, base) = (buyers::http(), world.api.url(""));
    let mut running = JoinSet::new();
    let mut asks = asks.into_iter();
    for _ in 0..ASKING {
        let mine: Vec<Ask> = asks.by_ref().take(asked.div_ceil(ASKING)).collect();
        let (http, base) = (http.clone(), base.clone());
        running.spawn(async move {
            let (mut found, mut sent, mut slowest) =
                (Vec::new(), 0, (Duration::ZERO, String::new()));
            for ask in mine {
                let started = Instant::now();
                let sends = buyers::ask(&http, &base, ask.sale, &ask.user, Some(&ask.key)).await;
                sent += sends.len();
                if started.elapsed() > slowest.0 {
                    let what = format!("{} key {}: {}", ask.sale.product, ask.key, told(&sends));
                    slowest = (started.elapsed(), what);
                }
                let answered = sends
                    .last()
                    .filter(|s| s.status == Some(200))
                    .and_then(|s| s.order.as_ref());
                if !answered.is_some_and(|order| ask.sold.contains(order)) {
                    found.push(format!(
                        "{}: key {} ({}) sold {:?}; asked again after the run: {}; during \
                         the run: {}",
                        ask.sale.product,
                        ask.key,
                        ask.user,
                        ask.sold,
                        told(&sends),
                        ask.during
                    ));
                }
            }
            (found, sent, slowest)
        });
    }
    let mut asked = Asked {
        keys: asked,
        sends: 0,
        slowest: (Duration::ZERO, String::new()),
        violations,
    };
    for (found, sent, slowest) in running.join_all().await {
        asked.violations.extend(found);
        asked.sends += sent;
        asked.slowest = asked.slowest.max(slowest);
    }
    asked
}
