//! The sale's front door (`seckill::admission`): a waiting room, a buyer's rate limit and
//! the sold-out flag, on two instances behind Nginx sharing one Redis.

use std::time::{Duration, Instant};

use seckill_testkit::{Api, Nginx, Service, int};
use serde_json::{Value, json};

use crate::service;

mod flag_and_limit;

/// Two instances (expired reservations swept every 50 ms) and Nginx in front of them.
pub(super) fn two_behind_nginx() -> (Service, Nginx, Api) {
    let cluster = service(2, &["--expiry-sweep-ms", "50"]);
    let nginx = Nginx::start(&cluster.instances);
    let api = Api::new(&nginx.url(""));
    (cluster, nginx, api)
}

/// Time enough for a notice (a reset's, an expiry's) to reach every instance: on loopback
/// it takes about a millisecond; an instance that misses one reads the terms again within
/// a second (`admission::TERMS_MAX_AGE`).
pub(super) const NOTICE: Duration = Duration::from_millis(100);

fn room(rate_per_s: u32, pass_ttl_ms: u64) -> Value {
    json!({ "rate_per_s": rate_per_s, "pass_ttl_ms": pass_ttl_ms })
}

async fn ticket(api: &Api, product: &str, user: &str) -> (u16, Value) {
    api.post(&format!("/room/{product}/ticket?user={user}"))
        .await
}

async fn poll(api: &Api, product: &str, user: &str, ticket: &str) -> (u16, Value) {
    api.get(&format!("/room/{product}?user={user}&ticket={ticket}"))
        .await
}

/// `user`'s ticket, polled until let in: their pass.
async fn pass_for(api: &Api, product: &str, user: &str) -> String {
    let (status, taken) = ticket(api, product, user).await;
    assert_eq!(status, 200, "{taken}");
    let ticket = taken["ticket"].as_str().expect("a ticket").to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, standing) = poll(api, product, user, &ticket).await;
        assert_eq!(status, 200, "{standing}");
        if standing["outcome"] == "admitted" {
            return standing["pass"].as_str().expect("a pass").to_owned();
        }
        assert!(Instant::now() < deadline, "{user} never let in: {standing}");
        let after = standing["poll_after_ms"].as_u64().expect("poll_after_ms");
        tokio::time::sleep(Duration::from_millis(after)).await;
    }
}

/// `/stats`' admission section once `check` holds of it (the instances add what they
/// counted in memory every 200 ms), or the last one seen.
pub(super) async fn admission_when(
    api: &Api,
    product: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let stats = api.stats(product).await;
        if check(&stats["admission"]) || Instant::now() > deadline {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A waiting room's contract: no pass → 403 `no_pass`; a forged pass, another buyer's, an
/// expired one, or one of the sale before → 403 `pass_refused`; the buyer's own pass sells,
/// on either instance (each checks it without Redis); a ticket is the buyer's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_room_sells_only_to_its_passes() {
    let (cluster, _nginx, api) = two_behind_nginx();
    let reset = api
        .reset_with(json!({"product": "701", "stock": 10, "waiting_room": room(1_000, 400)}))
        .await;
    assert_eq!(reset["waiting_room"]["rate_per_s"], 1_000, "{reset}");

    let (status, body) = api.deduct("701", "lua?user=alice").await;
    assert_eq!(
        (status, &body["outcome"]),
        (403, &json!("no_pass")),
        "{body}"
    );
    let (status, body) = api.deduct("701", "lua").await;
    assert_eq!(status, 400, "a room admits named buyers only: {body}");

    let pass = pass_for(&api, "701", "alice").await;
    let refused = |(status, body): (u16, Value)| {
        assert_eq!(
            (status, &body["outcome"]),
            (403, &json!("pass_refused")),
            "{body}"
        );
    };
    refused(
        api.deduct("701", &format!("lua?user=bob&pass={pass}"))
            .await,
    );
    let (head, tag) = pass.rsplit_once('.').unwrap();
    let flipped = if tag.starts_with('0') { "1" } else { "0" };
    let forged = format!("{head}.{flipped}{}", &tag[1..]);
    refused(
        api.deduct("701", &format!("lua?user=alice&pass={forged}"))
            .await,
    );
    let expires = head.split_once('.').unwrap().1;
    let longer = pass.replacen(
        expires,
        &(expires.parse::<i64>().unwrap() + 60_000).to_string(),
        1,
    );
    refused(
        api.deduct("701", &format!("lua?user=alice&pass={longer}"))
            .await,
    );

    // Her own pass, on each instance directly and through Nginx.
    for each in [cluster.api(0), cluster.api(1), api.clone()] {
        let (status, body) = each
            .deduct("701", &format!("lua?user=alice&pass={pass}"))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // A ticket is hers alone.
    let (_, taken) = ticket(&api, "701", "alice").await;
    assert_eq!(taken["number"], 1, "asking again keeps her place: {taken}");
    let (status, body) = poll(&api, "701", "bob", taken["ticket"].as_str().unwrap()).await;
    assert_eq!(
        (status, &body["outcome"]),
        (403, &json!("ticket_refused")),
        "{body}"
    );

    tokio::time::sleep(Duration::from_millis(450)).await;
    refused(
        api.deduct("701", &format!("lua?user=alice&pass={pass}"))
            .await,
    );
    let fresh = pass_for(&api, "701", "alice").await;
    api.reset_with(json!({"product": "701", "stock": 10, "waiting_room": room(1_000, 60_000)}))
        .await;
    // Each instance forgets the old sale's terms when the reset's notice reaches it.
    tokio::time::sleep(NOTICE).await;
    refused(
        api.deduct("701", &format!("lua?user=alice&pass={fresh}"))
            .await,
    );

    let stats = admission_when(&api, "701", |a| a["pass_refused"].as_i64() >= Some(1)).await;
    let counted = &stats["admission"];
    assert_eq!(counted["pass_refused"], 1, "only the new sale's: {stats}");
    assert_eq!(int(&stats, "sold"), 0, "{stats}");
}

/// Buyers are let in in the order they took their numbers, `rate_per_s` a second: every
/// answer a buyer gets says `admitted` exactly when the serving number has reached theirs
/// (so number n is never let in before n - 1 could be, nor kept once its turn came), its
/// `wait_ms` is the time until its turn at that rate, and the serving number grows at the
/// room's rate on the room's own clock — read from each pass's expiry (the admission's
/// time plus `pass_ttl_ms`). No clock of this test's decides it: a slow machine that polls
/// late changes when a buyer is let in, never what it is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_room_lets_buyers_in_in_arrival_order_at_its_rate() {
    let (_cluster, _nginx, api) = two_behind_nginx();
    let (rate, pass_ttl_ms) = (10_i64, 5_000_i64);
    let turn_ms = 1_000 / rate;
    assert_eq!(turn_ms * rate, 1_000, "a whole number of ms a turn");
    api.reset_with(json!({"product": "702", "stock": 100, "waiting_room": room(rate as u32, pass_ttl_ms as u64)}))
        .await;
    let mut tickets = Vec::new();
    for buyer in 0..20 {
        let user = format!("b{buyer}");
        let (status, taken) = ticket(&api, "702", &user).await;
        assert_eq!(status, 200, "{taken}");
        assert_eq!(
            taken["number"],
            buyer + 1,
            "numbers in arrival order: {taken}"
        );
        tickets.push((user, taken["ticket"].as_str().unwrap().to_owned()));
    }
    // Every answer each buyer got, polling until let in (often: to see its moment).
    let answers: Vec<Vec<Value>> =
        futures_util::future::join_all(tickets.iter().map(|(user, ticket)| {
            let api = api.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(30);
                let mut answers = Vec::new();
                loop {
                    let (status, standing) = poll(&api, "702", user, ticket).await;
                    assert_eq!(status, 200, "{standing}");
                    let admitted = standing["outcome"] == "admitted";
                    let wait = standing["wait_ms"].as_u64().unwrap();
                    answers.push(standing);
                    if admitted {
                        return answers;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "{user} never let in: {answers:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(wait.clamp(5, 20))).await;
                }
            }
        }))
        .await;
    assert!(
        answers.iter().any(|a| a.len() > 1),
        "some buyers wait at 10 a second"
    );

    // Each answer: let in exactly when its number is served; else told how long, at the
    // rate, until it is.
    let field = |a: &Value, name: &str| a[name].as_i64().unwrap_or_else(|| panic!("{name} in {a}"));
    for answer in answers.iter().flatten() {
        let (number, serving) = (field(answer, "number"), field(answer, "serving"));
        let admitted = answer["outcome"] == "admitted";
        assert_eq!(
            admitted,
            serving >= number,
            "let in exactly once its number is served: {answer}"
        );
        if !admitted {
            let wait = field(answer, "wait_ms");
            assert!(
                wait > (number - serving - 1) * turn_ms && wait <= (number - serving) * turn_ms,
                "{} numbers ahead at {rate} a second: {answer}",
                number - serving
            );
            assert_eq!(field(answer, "ahead"), number - serving - 1, "{answer}");
        }
    }
    // The serving number at each admission, on the room's clock, fits one opening time and
    // the rate: serving = floor((t - opened) * rate / 1000) for all of them.
    let (mut after, mut until) = (i64::MIN, i64::MAX);
    for admitted in answers.iter().filter_map(|a| a.last()) {
        let at = field(admitted, "pass_expires_at_ms") - pass_ttl_ms;
        let serving = field(admitted, "serving");
        // opened in (at - (serving + 1) * turn, at - serving * turn]
        after = after.max(at - (serving + 1) * turn_ms);
        until = until.min(at - serving * turn_ms);
    }
    assert!(
        after < until,
        "the serving numbers at the admissions grow at {rate} a second on the room's clock: {:?}",
        answers.iter().filter_map(|a| a.last()).collect::<Vec<_>>()
    );
}

/// When the stock runs out, everyone still waiting is told at their next poll, and the
/// room hands out no more numbers or passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sold_out_is_told_to_everyone_still_waiting() {
    let (_cluster, _nginx, api) = two_behind_nginx();
    // Two a second: a at 0.5 s, b at 1 s, c at 1.5 s.
    api.reset_with(json!({"product": "703", "stock": 2, "waiting_room": room(2, 5_000)}))
        .await;
    let mut numbers = Vec::new();
    for buyer in ["a", "b", "c"] {
        let (status, taken) = ticket(&api, "703", buyer).await;
        assert_eq!(status, 200, "{taken}");
        numbers.push(taken);
    }
    for buyer in ["a", "b"] {
        let pass = pass_for(&api, "703", buyer).await;
        let (status, body) = api
            .deduct("703", &format!("watchdog?user={buyer}&pass={pass}"))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // A poll reads the stock at most every 50 ms per instance.
    tokio::time::sleep(Duration::from_millis(60)).await;
    let waiting = numbers[2]["ticket"].as_str().unwrap();
    let (status, told) = poll(&api, "703", "c", waiting).await;
    assert_eq!(
        (status, &told["outcome"]),
        (409, &json!("sold_out")),
        "{told}"
    );
    let (status, late) = ticket(&api, "703", "d").await;
    assert_eq!(
        (status, &late["outcome"]),
        (409, &json!("sold_out")),
        "{late}"
    );
    let stats = api.stats("703").await;
    assert_eq!(int(&stats, "sold"), 2, "{stats}");
    assert_eq!(stats["admission"]["tickets"], 3, "{stats}");
}

/// Bounds and ids at the front door: every out-of-bounds term is a 400 that changes
/// nothing; ids that could smuggle keys, and tokens that are not the service's, are
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_at_the_front_door_is_refused() {
    let (_cluster, _nginx, api) = two_behind_nginx();
    api.reset_with(json!({"product": "706", "stock": 5})).await;
    for bad in [
        json!({"waiting_room": room(0, 1_000)}),
        json!({"waiting_room": room(100_001, 1_000)}),
        json!({"waiting_room": room(10, 99)}),
        json!({"waiting_room": room(10, 600_001)}),
        json!({"waiting_room": {"rate_per_s": 10}}),
        json!({"waiting_room": {"rate_per_s": 10, "pass_ttl_ms": 1000, "x": 1}}),
        json!({"rate_limit": {"per_s": 0}}),
        json!({"rate_limit": {"per_s": 10_001}}),
        json!({"rate_limit": {"per_s": 5, "burst": 10_001}}),
        json!({"sold_out_flag": "maybe"}),
    ] {
        let mut body = json!({"product": "706", "stock": 9});
        body.as_object_mut()
            .unwrap()
            .extend(bad.as_object().unwrap().clone());
        let (status, answer) = api.post_json("/admin/reset", &body).await;
        assert_eq!(status, 400, "{body}: {answer}");
    }
    assert_eq!(
        int(&api.stats("706").await, "initial"),
        5,
        "nothing changed"
    );

    let (status, body) = ticket(&api, "706", "alice").await;
    assert_eq!(
        (status, &body["outcome"]),
        (404, &json!("no_waiting_room")),
        "{body}"
    );
    let (status, body) = api.deduct("706", "lua?user=alice&pass=1.2.3").await;
    assert_eq!(
        status, 400,
        "a product without a room takes no pass: {body}"
    );

    api.reset_with(json!({"product": "706", "stock": 5, "waiting_room": room(100, 1_000)}))
        .await;
    for path in [
        "/room/706/ticket",
        "/room/706/ticket?user=a%7Bb%7D",
        "/room/706/ticket?user=a&user=b",
        "/room/706/ticket?user=a&ticket=1",
        "/room/7%7B06%7D/ticket?user=a",
    ] {
        let (status, body) = api.post(path).await;
        assert!(matches!(status, 400 | 404), "{path}: {status} {body}");
    }
    let long = "9".repeat(500);
    for path in [
        format!("/room/706?user=a&ticket={long}"),
        "/room/706?user=a&ticket=1.1.zz".to_owned(),
        "/room/706?user=a".to_owned(),
    ] {
        let (status, body) = api.get(&path).await;
        assert!(matches!(status, 400 | 403), "{path}: {status} {body}");
    }
    let (status, body) = api.deduct("706", &format!("lua?user=a&pass={long}")).await;
    assert_eq!(status, 400, "{body}");
    let stats = api.stats("706").await;
    assert_eq!(int(&stats, "sold"), 0, "{stats}");
    assert_eq!(stats["admission"]["tickets"], 0, "{stats}");
}
