//! Buyers clicking through Nginx as a buyer's app would: a click under its own
//! `Idempotency-Key` (most clicks) is sent again with that key while its answer says
//! nothing about the sale — a 503, 502, 504, 423 or no answer — and every send's answer is
//! recorded. A click without a key is sent once.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use seckill_testkit::api::deduct_path;
use serde_json::Value;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::world::{Sale, World};

/// Buyers clicking at once.
const BUYERS: usize = 48;

/// How long a click is sent again for, at most, and how many times.
const RESEND_FOR: Duration = Duration::from_secs(20);
const MAX_SENDS: usize = 12;

/// How long a send waits for its answer: past the instances' own answer to a Redis that
/// does not answer, short of a paused instance's whole pause.
const SEND_TIMEOUT: Duration = Duration::from_secs(6);

/// One click: a buyer asking for one unit of a sale's product, and every answer it got.
#[derive(Debug)]
pub struct Click {
    /// Its index in the world's sales.
    pub sale: usize,
    pub user: String,
    pub key: Option<String>,
    pub sends: Vec<Sent>,
}

/// One send of a click and its answer.
#[derive(Debug)]
pub struct Sent {
    /// `None` when no answer came (the connection failed, or [`SEND_TIMEOUT`]).
    pub status: Option<u16>,
    pub outcome: String,
    pub order: Option<String>,
    pub replayed: bool,
}

impl Click {
    /// The orders its 200s named.
    pub fn orders(&self) -> impl Iterator<Item = &str> {
        self.sends
            .iter()
            .filter(|s| s.status == Some(200))
            .filter_map(|s| s.order.as_deref())
    }
}

/// What each send was told, the same answer in a row once:
/// `503 redis_unavailable × 4, 200 deducted <order>`.
pub fn told(sends: &[Sent]) -> String {
    let mut runs: Vec<(String, usize)> = Vec::new();
    for s in sends {
        let status = s.status.map_or("none".to_owned(), |s| s.to_string());
        let answer = match &s.order {
            Some(order) => format!("{status} {} {order}", s.outcome),
            None => format!("{status} {}", s.outcome),
        };
        match runs.last_mut() {
            Some((last, n)) if *last == answer => *n += 1,
            _ => runs.push((answer, 1)),
        }
    }
    runs.into_iter()
        .map(|(answer, n)| match n {
            1 => answer,
            n => format!("{answer} × {n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every click, once the buyers stopped.
pub struct History {
    pub clicks: Vec<Click>,
}

impl History {
    /// Clicks, sends and answers by status and outcome.
    pub fn summary(&self) -> String {
        let mut answers: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut sends = 0;
        for click in &self.clicks {
            for sent in &click.sends {
                sends += 1;
                let status = sent.status.map_or("none".to_owned(), |s| s.to_string());
                *answers.entry((status, sent.outcome.clone())).or_default() += 1;
            }
        }
        let resent = self.clicks.iter().filter(|c| c.sends.len() > 1).count();
        let replayed = self
            .clicks
            .iter()
            .flat_map(|c| &c.sends)
            .filter(|s| s.replayed)
            .count();
        let mut out = format!(
            "{} clicks, {sends} sends ({resent} clicks sent more than once, {replayed} answers \
             replayed); answers:",
            self.clicks.len()
        );
        for ((status, outcome), n) in answers {
            let _ = write!(out, " {status} {outcome} × {n};");
        }
        out
    }
}

/// The buyers, clicking until the load's end.
pub struct Buyers {
    running: JoinSet<Vec<Click>>,
}

/// [`BUYERS`] buyers clicking through `world`'s Nginx for `load`, their choices drawn from
/// `seed`.
pub fn start(world: &World, seed: u64, load: Duration) -> Buyers {
    let http = http();
    let until = Instant::now() + load;
    let mut running = JoinSet::new();
    for buyer in 0..BUYERS {
        let (http, base) = (http.clone(), world.api.url(""));
        let (sales, keyed) = (world.sales, world.keyed_percent);
        let mut rng = fastrand::Rng::with_seed(seed ^ ((buyer as u64 + 1) << 32));
        running.spawn(async move {
            let mut clicks = Vec::new();
            while Instant::now() < until {
                clicks.push(click(&http, &base, sales, keyed, &mut rng).await);
            }
            clicks
        });
    }
    Buyers { running }
}

/// A client as the buyers' app: [`SEND_TIMEOUT`] on every send.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(SEND_TIMEOUT)
        .pool_max_idle_per_host(BUYERS)
        .build()
        .expect("an HTTP client")
}

impl Buyers {
    /// Waits for every buyer's last click (resends included) and returns them all.
    pub async fn finish(self) -> History {
        let clicks = self
            .running
            .join_all()
            .await
            .into_iter()
            .flatten()
            .collect();
        History { clicks }
    }
}

/// One click on a sale drawn by `rng` from `sales`, under a key `keyed` times in 100, sent
/// until its answer says what became of it.
async fn click(
    http: &reqwest::Client,
    base: &str,
    sales: &[Sale],
    keyed: u32,
    rng: &mut fastrand::Rng,
) -> Click {
    let index = rng.usize(0..sales.len());
    let sale = &sales[index];
    let user = format!("u{}", rng.u32(0..sale.users));
    let key = (rng.u32(0..100) < keyed).then(|| uuid::Uuid::from_u128(rng.u128(..)).to_string());
    let sends = ask(http, base, sale, &user, key.as_deref()).await;
    Click {
        sale: index,
        user,
        key,
        sends,
    }
}

/// `user` asking for a unit of `sale` (under `key`, if any) until the answer says what
/// became of it: every send and its answer. On a room sale the buyer first gets a pass (a
/// ticket, then polls), and a fresh one whenever a send is refused for a pass that ran
/// out (the same key: the pass is not part of what a key's request is).
pub async fn ask(
    http: &reqwest::Client,
    base: &str,
    sale: &Sale,
    user: &str,
    key: Option<&str>,
) -> Vec<Sent> {
    let url = format!("{base}{}&user={user}", deduct_path(sale.product, sale.path));
    let started = Instant::now();
    let mut sends = Vec::new();
    let mut pause = Duration::from_millis(50);
    loop {
        let pass = if sale.room {
            match pass(http, base, sale.product, user, started).await {
                Some(pass) => format!("&pass={pass}"),
                None => {
                    sends.push(Sent {
                        status: None,
                        outcome: "no pass in time".into(),
                        order: None,
                        replayed: false,
                    });
                    break;
                }
            }
        } else {
            String::new()
        };
        let sent = send(http, &format!("{url}{pass}"), key).await;
        let expired = sale.room && sent.outcome == "pass_refused";
        let again = (key.is_some() || expired)
            && matches!(sent.status, None | Some(403 | 408 | 423 | 502 | 503 | 504))
            && (sent.status != Some(403) || expired);
        sends.push(sent);
        if !again || sends.len() >= MAX_SENDS || started.elapsed() >= RESEND_FOR {
            break;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
    sends
}

/// `user`'s pass for `product`'s waiting room: a ticket, then polls until let in, each
/// asked again while unanswered; `None` past [`RESEND_FOR`] from `started`, or when the
/// room says the product sold out.
async fn pass(
    http: &reqwest::Client,
    base: &str,
    product: &str,
    user: &str,
    started: Instant,
) -> Option<String> {
    let mut ticket: Option<String> = None;
    while started.elapsed() < RESEND_FOR {
        let (status, body) = match &ticket {
            None => answer(http.post(format!("{base}/room/{product}/ticket?user={user}"))).await,
            Some(t) => {
                answer(http.get(format!("{base}/room/{product}?user={user}&ticket={t}"))).await
            }
        };
        match (status, &ticket) {
            (Some(200), None) => ticket = body["ticket"].as_str().map(str::to_owned),
            (Some(200), Some(_)) if body["outcome"] == "admitted" => {
                return body["pass"].as_str().map(str::to_owned);
            }
            (Some(200), Some(_)) => {
                let after = body["poll_after_ms"].as_u64().unwrap_or(100).min(500);
                tokio::time::sleep(Duration::from_millis(after)).await;
            }
            (Some(409), _) => return None,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    None
}

async fn answer(request: reqwest::RequestBuilder) -> (Option<u16>, Value) {
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            (Some(status), response.json().await.unwrap_or(Value::Null))
        }
        Err(_) => (None, Value::Null),
    }
}

async fn send(http: &reqwest::Client, url: &str, key: Option<&str>) -> Sent {
    let mut request = http.post(url);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let Ok(response) = request.send().await else {
        return Sent {
            status: None,
            outcome: "no answer".into(),
            order: None,
            replayed: false,
        };
    };
    let status = response.status().as_u16();
    // An answer whose body never came is as lost as one that never came at all.
    let Ok(body) = response.json::<Value>().await else {
        return Sent {
            status: None,
            outcome: format!("{status}, its body lost"),
            order: None,
            replayed: false,
        };
    };
    Sent {
        status: Some(status),
        outcome: body["outcome"].as_str().unwrap_or("?").to_owned(),
        order: body["order"].as_str().map(str::to_owned),
        replayed: body["replayed"].as_bool().unwrap_or(false),
    }
}
