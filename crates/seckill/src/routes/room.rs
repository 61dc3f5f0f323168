//! `POST /room/{product}/ticket` and `GET /room/{product}`: a product's waiting room
//! (`crate::admission`). A buyer takes a number once, polls until the serving number
//! reaches it, and gets a pass to bring to `/deduct_stock` (`pass=`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;

use super::params;
use crate::admission::terms::Room;
use crate::admission::{Door, room, wall_clock_ms};
use crate::error::AppError;
use crate::keys::{ProductId, ProductKeys, UserId};
use crate::outcome::{self, TurnedAway};
use crate::product;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/room/{product}/ticket", post(take_ticket))
        .route("/room/{product}", get(poll))
}

/// Where a buyer stands.
#[derive(Debug, Serialize)]
struct Standing {
    /// `waiting`, `admitted` (with a pass) or, for a ticket, `ticket`.
    outcome: &'static str,
    product: String,
    user: String,
    /// The buyer's number: its place in arrival order.
    number: i64,
    /// The highest number let in now.
    serving: i64,
    /// Buyers let in before this one still to come.
    ahead: i64,
    /// How long until this buyer is let in, ms (0: now).
    wait_ms: i64,
    /// When to ask again, ms.
    poll_after_ms: i64,
    /// The signed ticket to poll with (`ticket=`).
    #[serde(skip_serializing_if = "Option::is_none")]
    ticket: Option<String>,
    /// Admitted: the pass to deduct with (`pass=`), good until `pass_expires_at_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pass: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pass_expires_at_ms: Option<i64>,
}

/// The longest a buyer is told to wait before asking again: a buyer far back polls every
/// 5 s, and is told to come back at its turn once that is nearer — the serving number is
/// known ahead, so buyers come to the stock at the room's rate, not in bunches.
const MAX_POLL_AFTER_MS: i64 = 5_000;
/// The shortest.
const MIN_POLL_AFTER_MS: i64 = 100;

async fn take_ticket(
    State(state): State<AppState>,
    Path(product): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Standing>, AppError> {
    let (keys, user, rest) = request(&product, query.as_deref(), &headers, &body)?;
    if let Some((name, _)) = rest.first() {
        // Cut short: the name is the client's.
        let name: String = name.chars().take(40).collect();
        return Err(AppError::BadRequest(format!(
            "a ticket takes user only, not {name:?}"
        )));
    }
    let (door, room) = room_of(&state, &keys).await?;
    let epoch = door.terms.epoch;
    if stock_gone(&state, &keys, &door).await? {
        return Err(sold_out(&keys.product));
    }
    let (number, ticket) = state.admission.ticket(&keys, &room, epoch, &user).await?;
    let mut standing = standing(&keys.product, &user, &room, number, wall_clock_ms());
    standing.outcome = "ticket";
    standing.ticket = Some(ticket);
    Ok(Json(standing))
}

async fn poll(
    State(state): State<AppState>,
    Path(product): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Standing>, AppError> {
    let (keys, user, rest) = request(&product, query.as_deref(), &headers, &[])?;
    let ticket = match rest.as_slice() {
        [(name, ticket)] if name == "ticket" => ticket,
        _ => {
            return Err(AppError::BadRequest(
                "a poll takes user and ticket, once each".into(),
            ));
        }
    };
    if ticket.len() > room::MAX_TOKEN_LEN {
        return Err(refused(room::Refusal::Malformed));
    }
    let (door, room) = room_of(&state, &keys).await?;
    let epoch = door.terms.epoch;
    let number = room::read_ticket(&room, keys.product.as_str(), user.as_str(), epoch, ticket)
        .map_err(refused)?;
    // Everyone still waiting is told at their next poll, and nobody is let in any more.
    if stock_gone(&state, &keys, &door).await? {
        return Err(sold_out(&keys.product));
    }
    let now = wall_clock_ms();
    let mut standing = standing(&keys.product, &user, &room, number, now);
    if standing.wait_ms == 0 {
        let expires_at = now + i64::try_from(room.pass_ttl_ms).unwrap_or(i64::MAX);
        standing.outcome = "admitted";
        standing.pass = Some(room::pass(
            &room,
            keys.product.as_str(),
            user.as_str(),
            epoch,
            expires_at,
        ));
        standing.pass_expires_at_ms = Some(expires_at);
        state.admission.passed(&keys.product, epoch);
    }
    Ok(Json(standing))
}

type Request = (Arc<ProductKeys>, UserId, Vec<(String, String)>);

/// The product in the path, the buyer (`user`, which every room request names), and the
/// other parameters.
fn request(
    product: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Request, AppError> {
    let product = ProductId::parse(product).map_err(AppError::BadRequest)?;
    let mut params = params(query, headers, body)?;
    let users: Vec<usize> = (0..params.len())
        .filter(|&i| params[i].0 == "user")
        .collect();
    let [at] = users[..] else {
        return Err(AppError::BadRequest(
            "a waiting room needs the buyer: user, once".into(),
        ));
    };
    let user = UserId::parse(&params.remove(at).1).map_err(AppError::BadRequest)?;
    Ok((Arc::new(ProductKeys::new(&product)), user, params))
}

/// The product's door and its waiting room, or why there is none.
async fn room_of(state: &AppState, keys: &ProductKeys) -> Result<(Arc<Door>, Room), AppError> {
    let door = state.admission.door(keys).await?;
    if door.terms.epoch == 0 {
        return Err(AppError::UnknownProduct(keys.product.to_string()));
    }
    let Some(room) = door.terms.room.clone() else {
        return Err(AppError::TurnedAway {
            why: TurnedAway::NoWaitingRoom,
            message: format!(
                "product {} has no waiting room: deduct directly (a reset with waiting_room \
                 opens one)",
                keys.product
            ),
            retry_after_s: None,
        });
    };
    Ok((door, room))
}

/// Whether the product is sold out: this instance's flag, a poll's reading of the stock
/// within the last 50 ms, or the stock read now.
async fn stock_gone(state: &AppState, keys: &ProductKeys, door: &Door) -> Result<bool, AppError> {
    if state.admission.flagged(&keys.product, door) {
        return Ok(true);
    }
    if let Some(gone) = door.stock_gone_lately() {
        return Ok(gone);
    }
    let (remaining, _) = product::remaining(&state.store, &keys.product).await?;
    door.saw_stock(remaining <= 0);
    Ok(remaining <= 0)
}

fn standing(product: &ProductId, user: &UserId, room: &Room, number: i64, now: i64) -> Standing {
    let serving = room::serving(room, now);
    let wait_ms = room::wait_ms(room, number, now);
    Standing {
        outcome: outcome::WAITING,
        product: product.to_string(),
        user: user.as_str().to_owned(),
        number,
        serving,
        ahead: (number - serving - 1).max(0),
        wait_ms,
        poll_after_ms: wait_ms.clamp(MIN_POLL_AFTER_MS, MAX_POLL_AFTER_MS),
        ticket: None,
        pass: None,
        pass_expires_at_ms: None,
    }
}

fn sold_out(product: &ProductId) -> AppError {
    AppError::TurnedAway {
        why: TurnedAway::SoldOut,
        message: format!("product {product} is sold out: the waiting room lets nobody in now"),
        retry_after_s: None,
    }
}

fn refused(refusal: room::Refusal) -> AppError {
    AppError::TurnedAway {
        why: TurnedAway::TicketRefused,
        message: format!("the ticket is refused: {}", refusal.reason()),
        retry_after_s: None,
    }
}
