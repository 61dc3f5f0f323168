//! `POST|GET /deduct_stock/{variant}` and `/deduct_stock` (the instance's default variant).

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use redis::AsyncCommands;

use super::params;
use crate::admission::Door;
use crate::error::AppError;
use crate::idempotency::{self, Keyed, Replay};
use crate::keys::IdempotencyKey;
use crate::knobs::Knobs;
use crate::outcome::Counter;
use crate::state::AppState;
use crate::variants::lost::{self, Replayed};
use crate::variants::{Deduction, Outcome, Variant};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/deduct_stock", get(deduct_default).post(deduct_default))
        .route(
            "/deduct_stock/{variant}",
            get(deduct_named).post(deduct_named),
        )
}

async fn deduct_default(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    Headers(headers): Headers,
    body: Bytes,
) -> Response {
    let variant = state.settings.default_variant;
    deduct(state, variant, query, headers, body).await
}

async fn deduct_named(
    State(state): State<AppState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    Headers(headers): Headers,
    body: Bytes,
) -> Response {
    match Variant::parse(&name) {
        Some(variant) => deduct(state, variant, query, headers, body).await,
        None => {
            let names = crate::variants::VARIANTS.iter().map(|v| v.name()).collect();
            AppError::UnknownVariant(name.chars().take(40).collect(), names).into_response()
        }
    }
}

/// The request's headers, taken from it rather than copied as the `HeaderMap` extractor
/// does: nothing after the handler's extractors reads them (the body is read by its
/// length, its limit a layer's).
struct Headers(HeaderMap);

impl<S: Send + Sync> FromRequestParts<S> for Headers {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(Self(std::mem::take(&mut parts.headers)))
    }
}

/// The body of every answer that got as far as a variant.
#[derive(Debug, Serialize)]
struct Answer<'a> {
    outcome: &'static str,
    variant: Variant,
    product: String,
    instance: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    remaining: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shard: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'static str>,
    /// How long the work inside the lock really took, µs, when `work_ms` asked for some.
    #[serde(skip_serializing_if = "Option::is_none")]
    work_us: Option<u64>,
    /// A cart sold in part (`partly_sold`): the orders of the lines that sold.
    #[serde(skip_serializing_if = "Option::is_none")]
    orders: Option<Vec<String>>,
    /// The first answer to this request's `Idempotency-Key`, given again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    replayed: bool,
}

/// What a request came to: served now, or a key's first answer given again (and the
/// instance that gave it first, when known).
enum Served {
    Now(Outcome, Option<Duration>),
    Replayed(Replayed, Option<String>),
}

async fn deduct(
    state: AppState,
    variant: Variant,
    query: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let result = run(&state, variant, query.as_deref(), &headers, &body).await;
    let outcome = match &result {
        Ok((_, Served::Now(outcome, _))) => outcome.name(),
        Ok((_, Served::Replayed(..))) => "replayed",
        Err(err) => err.outcome(),
    };
    state
        .metrics
        .deduction(variant.name(), outcome, started.elapsed());
    match result {
        Ok((product, Served::Now(outcome, worked))) => {
            answer(&state, variant, product, outcome, worked)
        }
        Ok((product, Served::Replayed(replay, instance))) => {
            replayed(&state, variant, product, replay, instance)
        }
        Err(err) => err.into_response(),
    }
}

async fn run(
    state: &AppState,
    variant: Variant,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(String, Served), AppError> {
    let params = params(query, headers, body)?;
    let key = idempotency::key(headers)?;
    let settings = &state.settings;
    let takes = variant.spec().knobs;
    let knobs = Knobs::parse(
        variant.name(),
        takes,
        &params,
        &settings.limits,
        settings.faults,
    )?;
    let product = knobs.product.to_string();
    let mut deduction = Deduction::new(state.context.clone(), variant, knobs);
    if key.is_some() && variant.spec().stock_in_database {
        // The key's claim and answer live in Redis, the sale in the database: no one
        // step could record both, and a repeat after a crash could sell twice.
        return Err(AppError::BadRequest(format!(
            "{variant} takes no Idempotency-Key: its sale is in PostgreSQL, the keys in Redis"
        )));
    }
    let whole = variant.spec().whole_stock;
    if let Some(key) = key {
        // A keyed request runs on a task of its own from before its claim to its answer:
        // a client hanging up (or the request timeout) cannot leave its key claimed with
        // nobody to answer it (a repeat would wait out the claim's deadline), nor cut it
        // short between taking a lock and giving it back. Boxed, as every path a request
        // without a key does not take: inline, it would make every request's future larger.
        let request = fingerprint(variant, params);
        let state = state.clone();
        let served = tokio::spawn(Box::pin(async move {
            if let Some(served) = claim_key(&state, &mut deduction, key, &request).await? {
                return Ok(served);
            }
            let door = admit(&state, &deduction, whole).await?;
            let (outcome, worked) = serve(&deduction).await;
            let outcome = outcome?;
            let product = &deduction.product.product;
            state.admission.saw(product, &door, &outcome, whole);
            Ok::<_, AppError>(Served::Now(outcome, worked))
        }));
        let served = served
            .await
            .map_err(|err| AppError::Internal(err.into()))??;
        return Ok((product, served));
    }
    let product_keys = deduction.product.clone();
    let (door, (outcome, worked)) = if variant.spec().must_finish {
        // Spawned, so that a client hanging up (or the request timeout) cannot cut a
        // deduction short between taking a lock and giving it back.
        let state = state.clone();
        let served = tokio::spawn(async move {
            let door = admit(&state, &deduction, whole).await?;
            Ok::<_, AppError>((door, serve(&deduction).await))
        });
        served
            .await
            .map_err(|err| AppError::Internal(err.into()))??
    } else {
        let door = admit(state, &deduction, whole).await?;
        (door, serve(&deduction).await)
    };
    let outcome = outcome?;
    state
        .admission
        .saw(&product_keys.product, &door, &outcome, whole);
    Ok((product, Served::Now(outcome, worked)))
}

/// The request's key claimed for `d` (and taken over, fenced, where it had to be):
/// `None` to go on and sell, or what to answer at once — the key's answer given again, or
/// "in flight". A recorded sale is asked of the replicas before it is given again
/// (`lost::replay`); one a failover took back gives the claim up, and the key is claimed
/// again, once, to serve the request anew.
async fn claim_key(
    state: &AppState,
    d: &mut Deduction,
    key: IdempotencyKey,
    request: &str,
) -> Result<Option<Served>, AppError> {
    for _ in 0..2 {
        let claimed = idempotency::claim_for(
            &state.idempotency,
            &d.product,
            key.clone(),
            request,
            &d.holder,
            d.knobs.longest(),
            || d.elsewhere(),
        );
        match claimed.await? {
            Keyed::Serve(claim) => {
                d.claim = Some(claim);
                return Ok(None);
            }
            Keyed::Replay(Replay { answer, instance }) => {
                match Box::pin(lost::replay(d, &key, answer)).await? {
                    Replayed::Lost => continue,
                    replayed => return Ok(Some(Served::Replayed(replayed, instance))),
                }
            }
            Keyed::InFlight => {
                Box::pin(count_in_flight(d)).await;
                return Ok(Some(Served::Now(Outcome::InFlight, None)));
            }
        }
    }
    // Given up twice: another request serves the key meanwhile.
    Box::pin(count_in_flight(d)).await;
    Ok(Some(Served::Now(Outcome::InFlight, None)))
}

/// The front door (`crate::admission`), after the key's claim, so that a repeat gets its
/// first answer whatever the door says now; a refusal gives the claim back.
async fn admit(state: &AppState, d: &Deduction, whole: bool) -> Result<Arc<Door>, AppError> {
    let knobs = &d.knobs;
    let admitted = state.admission.admit(
        &d.product,
        knobs.user.as_ref(),
        knobs.pass.as_deref(),
        whole,
    );
    let refused = match admitted.await {
        Ok(door) => return Ok(door),
        Err(refused) => refused,
    };
    if let Some(claim) = &d.claim {
        let (keys, holder) = (&state.idempotency, &d.holder);
        Box::pin(idempotency::finish(keys, claim, holder, None, false)).await;
    }
    Err(refused)
}

/// Runs the deduction, and gives its idempotency key's claim the answer.
async fn serve(d: &Deduction) -> (Result<Outcome, AppError>, Option<Duration>) {
    let outcome = d.run().await;
    if let Some(claim) = &d.claim {
        // A split product's shards are not on the claim's slot, and a cart sells in steps:
        // their answers are recorded here, after the sale.
        let recorded = !d.answers_after_sale();
        idempotency::finish(
            &d.app.idempotency,
            claim,
            &d.holder,
            outcome.as_ref().ok(),
            recorded,
        )
        .await;
        if matches!(outcome, Ok(Outcome::InFlight)) {
            count_in_flight(d).await;
        }
    }
    (outcome, d.worked())
}

/// Counts a 423 `in_flight` in the product's audit.
async fn count_in_flight(d: &Deduction) {
    let in_flight = Counter::InFlight.field();
    let counted: Result<i64, _> = d.redis().hincr(&d.product.audit, in_flight, 1).await;
    if let Err(err) = counted {
        tracing::warn!(error = %err, "an in_flight answer was not counted in the audit");
    }
}

/// What a request asked, to tell a repeat of it from another request under the same
/// key: the variant and every parameter but `pass`, in name order.
fn fingerprint(variant: Variant, mut params: Vec<(String, String)>) -> String {
    // A waiting room's pass is who may ask, not what is asked: a repeat brings a fresh one
    // when the first ran out.
    params.retain(|(name, _)| name != "pass");
    params.sort();
    let mut request = variant.name().to_owned();
    for (name, value) in params {
        request.push(if request.len() == variant.name().len() {
            '?'
        } else {
            '&'
        });
        request.push_str(&name);
        request.push('=');
        request.push_str(&value);
    }
    request
}

/// A key's first answer, given again: the same status, outcome and order — a sale only
/// once the replicas have it (`lost::replay`: a `200` is built from its confirmed sale).
fn replayed(
    state: &AppState,
    variant: Variant,
    product: String,
    replay: Replayed,
    instance: Option<String>,
) -> Response {
    let instance = instance.as_deref().unwrap_or(&state.settings.instance);
    let mut answer = Answer {
        outcome: Outcome::UNCONFIRMED,
        variant,
        product,
        instance,
        remaining: None,
        order: None,
        shard: None,
        note: None,
        work_us: None,
        orders: None,
        replayed: true,
    };
    let status = match replay {
        Replayed::Sold(confirmed) => {
            answer.outcome = Outcome::DEDUCTED;
            answer.remaining = confirmed.remaining();
            answer.order = Some(confirmed.order().to_owned());
            answer.shard = Some(confirmed.shard());
            StatusCode::OK
        }
        Replayed::Unconfirmed(taken) => {
            answer.order = Some(taken.order);
            answer.shard = Some(taken.shard);
            StatusCode::SERVICE_UNAVAILABLE
        }
        Replayed::Refusal {
            status,
            outcome,
            remaining,
        } => {
            answer.outcome = outcome;
            answer.remaining = remaining;
            status
        }
        Replayed::Lost => unreachable!("a lost sale's key is claimed again, never replayed"),
    };
    answer.note = Outcome::note_of(answer.outcome);
    let mut response = json(status, &answer);
    response
        .headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

fn answer(
    state: &AppState,
    variant: Variant,
    product: String,
    outcome: Outcome,
    worked: Option<Duration>,
) -> Response {
    let status = outcome.status();
    let mut answer = Answer {
        outcome: outcome.name(),
        variant,
        product,
        instance: &state.settings.instance,
        remaining: None,
        order: None,
        shard: None,
        note: None,
        work_us: worked.map(|w| u64::try_from(w.as_micros()).unwrap_or(u64::MAX)),
        orders: None,
        replayed: false,
    };
    answer.note = outcome.note();
    match outcome {
        // The one 200, from a sale the replicas asked for have.
        Outcome::Deducted(confirmed) => {
            answer.remaining = confirmed.remaining();
            answer.order = Some(confirmed.order().to_owned());
            answer.shard = Some(confirmed.shard());
        }
        Outcome::SoldOut { remaining } => answer.remaining = Some(remaining),
        Outcome::Unconfirmed(taken) => {
            answer.order = Some(taken.order);
            answer.shard = Some(taken.shard);
        }
        Outcome::Unknown { order, shard } => {
            answer.order = Some(order);
            answer.shard = Some(shard);
        }
        Outcome::PartlySold(lines) => {
            answer.orders = Some(lines.into_iter().map(|line| line.order).collect());
        }
        _ => {}
    }
    let mut response = json(status, &answer);
    if matches!(
        status,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::LOCKED | StatusCode::GATEWAY_TIMEOUT
    ) {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from_static("1"));
    }
    response
}

/// A JSON response, serialized in one go into one buffer (cheaper than `Json`'s writer on
/// the hot path), its content type a static header.
fn json(status: StatusCode, body: &impl Serialize) -> Response {
    let mut bytes = Vec::with_capacity(256);
    match serde_json::to_writer(&mut bytes, body) {
        Ok(()) => {
            let mut response = Response::new(Body::from(bytes));
            *response.status_mut() = status;
            let json = HeaderValue::from_static("application/json");
            response.headers_mut().insert(CONTENT_TYPE, json);
            response
        }
        Err(err) => AppError::Internal(err.into()).into_response(),
    }
}
