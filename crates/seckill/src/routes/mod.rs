//! The HTTP surface: one module per resource, each with its own `router()`, merged here.

mod admin;
mod book;
mod deduct;
mod health;
pub mod openapi;
mod orders;
mod page;
mod room;
mod stock;

use axum::Router;
use axum::http::HeaderMap;
use axum::http::header::CONTENT_TYPE;

use crate::error::AppError;
use crate::lessons::Lessons;
use crate::state::AppState;

pub fn router(state: AppState) -> Router {
    // The lessons the page starts: the admin routes' own, with the instance's state.
    let lessons = Lessons::new(&state.settings.bench_url);
    Router::new()
        .merge(deduct::router())
        .merge(stock::router())
        .merge(room::router())
        .merge(orders::router())
        .merge(page::router())
        .merge(book::router())
        .nest("/admin", admin::router(state.clone(), lessons))
        .with_state(state)
}

/// The probes (`/healthz`, `/readyz`, `/metrics`), apart from the rest: they are answered
/// past the in-flight limit, so that an instance shedding a burst is not also taken for
/// dead by whatever probes it (Kubernetes' kubelet, Nginx, a monitor).
pub fn probes(state: AppState) -> Router {
    health::router().with_state(state)
}

/// The request's parameters: the query string, plus a form-encoded body when there is one
/// (JMeter sends POST parameters in the body). Anything else in a body is refused.
fn params(
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Vec<(String, String)>, AppError> {
    let mut params: Vec<(String, String)> = match query {
        Some(query) => serde_urlencoded::from_str(query).map_err(|_| {
            AppError::BadRequest("the query string is not valid form encoding".into())
        })?,
        None => Vec::new(),
    };
    if !body.is_empty() {
        let form = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if !form {
            return Err(AppError::BadRequest(
                "a body must be application/x-www-form-urlencoded parameters (or empty)".into(),
            ));
        }
        let from_body: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
            .map_err(|_| AppError::BadRequest("the body is not valid form encoding".into()))?;
        params.extend(from_body);
    }
    Ok(params)
}
