//! The checker's rule on keys that sold: a buyer whose order exists gets it for the key
//! that bought it. After the run, every key under which Redis holds an order is sent again
//! by its buyer, with its request (resent as a buyer's app resends: on no answer, 502,
//! 503, 504, 423), and must be answered 200 naming that order — not `423 in_flight` for
//! ever, not `403 limit_reached`, not `409`, not another order.

use std::collections::BTreeMap;

use tokio::task::JoinSet;

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

/// How many keys that sold were asked again, and a violation for each not answered its
/// order.
pub async fn sold_keys_answer_their_order(
    world: &World,
    history: &History,
    sold: &[SoldKeys],
) -> (usize, Vec<String>) {
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
            let mut found = Vec::new();
            for ask in mine {
                let sends = buyers::ask(&http, &base, ask.sale, &ask.user, Some(&ask.key)).await;
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
            found
        });
    }
    violations.extend(running.join_all().await.into_iter().flatten());
    (asked, violations)
}
