//! The contract's refusals, in-process: every variant of the registry, every knob it
//! takes, the bodies, admin from afar, and Redis away.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{Request, StatusCode};
use clap::Parser;
use seckill::config::{Cli, Command, Limits};
use seckill::knobs::{Kind, Knob};
use seckill::variants::VARIANTS;
use serde_json::Value;
use tower::ServiceExt;

/// Where no Redis listens: the connection is refused at once.
const NO_REDIS: &str = "redis://127.0.0.1:1";

/// An instance on no Redis, with `args`, as if its peer were `peer`.
fn app_from(peer: [u8; 4], args: &[&str]) -> (Router, Limits) {
    let argv = [
        "seckill",
        "serve",
        "--redis-url",
        NO_REDIS,
        "--listen",
        "127.0.0.1:0",
    ];
    let Command::Serve(args) = Cli::parse_from(argv.iter().chain(args)).command;
    let limits = args.limits.clone();
    let state = seckill::startup::state(args, "in-process").expect("an instance");
    let app = seckill::startup::app(state).layer(MockConnectInfo(SocketAddr::from((peer, 4000))));
    (app, limits)
}

/// An instance on no Redis, asked from loopback.
fn app(args: &[&str]) -> (Router, Limits) {
    app_from([127, 0, 0, 1], args)
}

/// One request: its status, `Retry-After`, and its body as JSON (null when not JSON).
async fn send(app: &Router, request: Request<Body>) -> (StatusCode, bool, Value) {
    let response = app.clone().oneshot(request).await.expect("an answer");
    let status = response.status();
    let retry_after = response.headers().contains_key("retry-after");
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("a body");
    (
        status,
        retry_after,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn post(uri: &str) -> Request<Body> {
    Request::post(uri).body(Body::empty()).unwrap()
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

/// A refusal with a status, and a one-line message that says why.
fn assert_refused(what: &str, (status, _, body): &(StatusCode, bool, Value), expected: StatusCode) {
    assert_eq!(*status, expected, "{what}: {body}");
    let message = body["error"].as_str().unwrap_or_default();
    assert!(
        !message.is_empty() && message.len() < 300 && !message.contains('\n'),
        "{what}: no clear message: {body}"
    );
}

/// A value just past a knob's bound, when it has one.
fn past_bound(knob: &Knob, limits: &Limits) -> Option<String> {
    match knob.kind {
        Kind::Millis { max, .. } => Some((max(limits) + 1).to_string()),
        Kind::Count { max, .. } => Some((max + 1).to_string()),
        Kind::Switch { .. } => Some("maybe".into()),
        Kind::Choice { .. } => Some("explode".into()),
        // One product more than it takes.
        Kind::Products { max } => Some(
            (0..=max)
                .map(|n| format!("p{n}"))
                .collect::<Vec<_>>()
                .join(","),
        ),
    }
}

/// Every variant of the registry refuses, before anything reaches Redis: a knob it does not
/// take (and says which it takes), every knob it takes one step past its bound, a
/// duplicate, and a product id that could smuggle a key.
#[tokio::test]
async fn every_knob_of_every_variant_is_bounded_before_redis() {
    let (app, limits) = app(&["--faults"]);
    for variant in VARIANTS {
        let path = format!("/deduct_stock/{variant}");
        let answer = send(&app, post(&format!("{path}?surprise=1"))).await;
        assert_refused(
            &format!("{variant} surprise"),
            &answer,
            StatusCode::BAD_REQUEST,
        );
        let message = answer.2["error"].as_str().unwrap_or_default();
        for knob in variant.spec().knobs {
            assert!(
                message.contains(knob.name),
                "{variant} names {}: {message}",
                knob.name
            );
            let Some(past) = past_bound(knob, &limits) else {
                continue;
            };
            let uri = format!("{path}?{}={past}", knob.name);
            let answer = send(&app, post(&uri)).await;
            assert_refused(&uri, &answer, StatusCode::BAD_REQUEST);
        }
        for query in [
            "product=1&product=1",
            "product=%7B101%7D",
            "product=a:b",
            "product=",
        ] {
            let uri = format!("{path}?{query}");
            assert_refused(&uri, &send(&app, post(&uri)).await, StatusCode::BAD_REQUEST);
        }
    }
}

/// A fault is refused unless the instance was started with `--faults`.
#[tokio::test]
async fn faults_are_refused_unless_enabled() {
    let (app, _) = app(&[]);
    for variant in VARIANTS.iter().filter(|v| v.takes("fault")) {
        // Each variant's first fault, as it would be asked for.
        let knob = variant.spec().knobs.iter().find(|k| k.name == "fault");
        let Some(Kind::Choice { values }) = knob.map(|k| &k.kind) else {
            panic!("{variant}: fault is a choice");
        };
        let pause = if values[0] == "abandon" {
            ""
        } else {
            "&pause_ms=10"
        };
        let uri = format!("/deduct_stock/{variant}?fault={}{pause}", values[0]);
        let answer = send(&app, post(&uri)).await;
        assert_refused(&uri, &answer, StatusCode::BAD_REQUEST);
        assert!(
            answer.2["error"].as_str().unwrap().contains("--faults"),
            "{}",
            answer.2
        );
    }
}

/// An unknown variant is a 404 that lists the registry's.
#[tokio::test]
async fn unknown_variant_is_404_listing_the_registry() {
    let (app, _) = app(&[]);
    let answer = send(&app, post("/deduct_stock/pessimistic")).await;
    assert_refused("pessimistic", &answer, StatusCode::NOT_FOUND);
    let names: Vec<&str> = VARIANTS.iter().map(|v| v.name()).collect();
    assert_eq!(answer.2["variants"], serde_json::json!(names));
}

/// A body must be form parameters (JMeter's) or nothing; past the limit it is a 413.
#[tokio::test]
async fn bodies_that_are_not_forms_are_refused() {
    let (app, _) = app(&[]);
    let json = Request::post("/deduct_stock/lua")
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    assert_refused(
        "a JSON body",
        &send(&app, json).await,
        StatusCode::BAD_REQUEST,
    );
    let oversized = Request::post("/deduct_stock/lua")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("a".repeat(100_000)))
        .unwrap();
    let (status, _, _) = send(&app, oversized).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let form = Request::post("/deduct_stock/token?product=55")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("product=55"))
        .unwrap();
    let answer = send(&app, form).await;
    assert_refused(
        "a parameter in query and body",
        &answer,
        StatusCode::BAD_REQUEST,
    );
}

/// Admin: malformed bodies are 400 from loopback; from another host it is 403 without a
/// token, and 401 without the right one when there is one.
#[tokio::test]
async fn admin_refuses_bad_bodies_and_strangers() {
    let (app, _) = app(&[]);
    for body in [
        "",
        "{",
        r#"{"product":"101","stock":-1}"#,
        r#"{"product":"{101}","stock":5}"#,
    ] {
        let request = Request::post("/admin/reset")
            .body(Body::from(body))
            .unwrap();
        let answer = send(&app, request).await;
        assert_refused(&format!("reset {body:?}"), &answer, StatusCode::BAD_REQUEST);
    }
    let (afar, _) = app_from([10, 0, 0, 7], &[]);
    let reset = || {
        Request::post("/admin/reset")
            .body(Body::from(r#"{"product":"101","stock":5}"#))
            .unwrap()
    };
    assert_refused(
        "from afar",
        &send(&afar, reset()).await,
        StatusCode::FORBIDDEN,
    );
    let (guarded, _) = app_from([10, 0, 0, 7], &["--admin-token", "correct-horse-battery"]);
    assert_refused(
        "no token",
        &send(&guarded, reset()).await,
        StatusCode::UNAUTHORIZED,
    );
}

/// With Redis away (and the ZooKeeper ensemble and PostgreSQL too), the process is
/// healthy, not ready, and every variant answers 503 `redis_unavailable` with
/// `Retry-After` at once: every deduction first reads its product's front door (its terms
/// live in Redis's meta, `seckill::admission`), and a door it cannot read lets nobody in —
/// a lock that lives elsewhere (zookeeper, pg_unique, pg_advisory) is not asked.
#[tokio::test]
async fn redis_away_is_503_with_retry_after() {
    let (app, _) = app(&[
        "--redlock-urls",
        "redis://127.0.0.1:1,redis://127.0.0.1:1,redis://127.0.0.1:1",
        "--zookeeper-urls",
        "127.0.0.1:1",
        "--orders-db",
        "postgres://seckill@127.0.0.1:1/seckill",
    ]);
    assert_eq!(send(&app, get("/healthz")).await.0, StatusCode::OK);
    assert_eq!(
        send(&app, get("/readyz")).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    for variant in VARIANTS {
        // Redlock retries servers that do not answer for as long as it may wait.
        let wait = if variant.takes("wait_ms") {
            "?wait_ms=0"
        } else {
            ""
        };
        let uri = format!("/deduct_stock/{variant}{wait}");
        let (status, retry_after, body) = send(&app, post(&uri)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{variant}: {body}");
        assert!(retry_after, "{variant}: 503 without Retry-After");
        assert_eq!(body["outcome"], "redis_unavailable", "{variant}: {body}");
    }
}

/// `/openapi.json` and `/variants` are written from the registry: every variant, every
/// knob with this instance's bound, every variant's colour.
#[tokio::test]
async fn openapi_and_variants_come_from_the_registry() {
    let (app, limits) = app(&["--max-wait-ms", "1234"]);
    let (status, _, doc) = send(&app, get("/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    let listed = &doc["paths"]["/deduct_stock/{variant}"]["parameters"][0]["schema"]["enum"];
    let (_, _, variants) = send(&app, get("/variants")).await;
    for (i, variant) in VARIANTS.iter().enumerate() {
        assert_eq!(listed[i], variant.name());
        assert_eq!(variants[i]["name"], variant.name());
        assert_eq!(variants[i]["color"], variant.spec().color);
        for knob in variant.spec().knobs {
            assert_eq!(
                doc["components"]["parameters"][knob.name]["name"],
                knob.name
            );
        }
    }
    assert_eq!(limits.max_wait_ms, 1234);
    assert_eq!(
        doc["components"]["parameters"]["wait_ms"]["schema"]["maximum"],
        1234
    );
}
