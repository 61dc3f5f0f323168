//! `GET /`: the teaching page; `GET /lessons`: what it offers; `GET /variants`: each
//! variant's name, summary, colour and knobs, from the registry; `GET /live`: `/stats` as
//! the page polls it; `GET /trace`: the product's lock timeline. Starting, watching and cancelling a lesson is admin
//! (`/admin/lesson`, in `admin.rs`).
//!
//! The page is plain HTML, CSS and JavaScript in a few files in `src/page/` (`index.html`,
//! `page.css`, `i18n.js` with every string in English and Chinese, `timeline.js`,
//! `page.js`), built into the binary and served under `/page/`: no build step, nothing
//! fetched from elsewhere, so it works offline.

use axum::Json;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::{Value, json};

use super::stock::reconcile;
use crate::error::AppError;
use crate::keys::ProductId;
use crate::knobs::default_product;
use crate::lessons::{LESSONS, Lesson};
use crate::product;
use crate::state::AppState;
use crate::variants::VARIANTS;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(page))
        .route("/page/{file}", get(page_file))
        .route("/lessons", get(lessons))
        .route("/variants", get(variants))
        .route("/live", get(live))
        .route("/trace", get(trace))
}

/// The registry as the page reads it: names, summaries, colours, knobs.
async fn variants() -> Json<Value> {
    let variants: Vec<Value> = VARIANTS
        .iter()
        .map(|v| {
            let spec = v.spec();
            json!({
                "name": spec.name,
                "summary": spec.summary,
                "color": spec.color,
                "knobs": spec.knobs.iter().map(|k| k.name).collect::<Vec<_>>(),
                "in_progression": spec.in_progression,
                "splits_stock": spec.splits_stock,
            })
        })
        .collect();
    Json(Value::Array(variants))
}

/// `/stats`, with a product that was never reset as `{"stats": null}` rather than a 404:
/// to the page that is a state to show ("no stock yet"), not an error to log in the
/// browser's console several times a second. With `orders=1`, reconciled against the
/// orders' database as `/stats` is (the page asks for it every few polls: it reads every
/// order id of the sale from both stores).
async fn live(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, AppError> {
    let params = super::params(query.as_deref(), &headers, &[])?;
    let mut reconciled = false;
    let mut product = None;
    for (name, value) in &params {
        match (name.as_str(), value.as_str()) {
            ("orders", "1") if !reconciled => reconciled = true,
            ("product", value) if product.is_none() => {
                product = Some(ProductId::parse(value).map_err(AppError::BadRequest)?);
            }
            _ => {
                return Err(AppError::BadRequest(
                    "the parameters are product and orders=1, each once".into(),
                ));
            }
        }
    }
    let product = product.unwrap_or_else(default_product);
    match product::stats(&state.store, &state.lock_store, &product).await {
        Ok(mut stats) => {
            if reconciled {
                reconcile(&state, &product, &mut stats).await?;
            }
            Ok(Json(json!({ "stats": stats })))
        }
        Err(AppError::UnknownProduct(_)) => Ok(Json(json!({ "stats": null }))),
        Err(err) => Err(err),
    }
}

/// `GET /trace?product=&since=`: the product's timeline from `since` (Redis time, ms; 0
/// for all of it) on, with Redis's time now, so that the page can draw the sections still
/// open. A product that was never reset has an empty timeline (as `/live` has no stats).
async fn trace(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, AppError> {
    let params = super::params(query.as_deref(), &headers, &[])?;
    let (mut product, mut since) = (None, None);
    for (name, value) in &params {
        match name.as_str() {
            "product" if product.is_none() => {
                product = Some(ProductId::parse(value).map_err(AppError::BadRequest)?);
            }
            "since" if since.is_none() => {
                since = Some(value.parse::<u64>().map_err(|_| {
                    AppError::BadRequest("since is a time in ms (Redis time), 0 or more".into())
                })?);
            }
            _ => {
                return Err(AppError::BadRequest(
                    "the parameters are product and since, each once".into(),
                ));
            }
        }
    }
    let product = product.unwrap_or_else(default_product);
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut state.store.conn())
        .await?;
    let now_ms = secs * 1000 + micros / 1000;
    let (traced, events) =
        match crate::trace::read(&state.store, &product, since.unwrap_or(0)).await {
            Ok(timeline) => timeline,
            Err(AppError::UnknownProduct(_)) => (false, Vec::new()),
            Err(err) => return Err(err),
        };
    Ok(Json(json!({
        "product": product.as_str(),
        "traced": traced,
        "now_ms": now_ms,
        "events": events,
    })))
}

/// The page's other files, by name; nothing else is served from here.
async fn page_file(Path(file): Path<String>) -> axum::response::Response {
    let (content_type, body) = match file.as_str() {
        "page.css" => ("text/css; charset=utf-8", include_str!("../page/page.css")),
        "i18n.js" => (
            "text/javascript; charset=utf-8",
            include_str!("../page/i18n.js"),
        ),
        "timeline.js" => (
            "text/javascript; charset=utf-8",
            include_str!("../page/timeline.js"),
        ),
        "page.js" => (
            "text/javascript; charset=utf-8",
            include_str!("../page/page.js"),
        ),
        _ => return axum::http::StatusCode::NOT_FOUND.into_response(),
    };
    (
        [(CONTENT_TYPE, content_type), (CACHE_CONTROL, "no-cache")],
        body,
    )
        .into_response()
}

async fn page() -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CACHE_CONTROL, "no-cache"),
        ],
        include_str!("../page/index.html"),
    )
}

/// The lessons, each with whether this instance can run it (`available`; when not,
/// `needs` is the flag that would let it).
async fn lessons(State(state): State<AppState>) -> Json<Value> {
    let lessons: Vec<Value> = LESSONS
        .iter()
        .map(|lesson: &Lesson| {
            let mut described = json!(lesson);
            described["available"] = json!(crate::lessons::available(lesson, &state));
            described
        })
        .collect();
    Json(Value::Array(lessons))
}
