//! The one error type handlers return, and the status each variant maps to.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use redis::{ErrorKind, RedisError, ServerErrorKind};
use serde_json::json;

use seckill_lock::LockError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// 400: a parameter or body the service will not act on. The text says which and why.
    #[error("{0}")]
    BadRequest(String),

    /// 404: the path names no variant; the body lists the ones there are (given with it).
    #[error("unknown variant {0:?}")]
    UnknownVariant(String, Vec<&'static str>),

    /// 404: no stock was ever set for the product (or Redis lost it). Never sold as stock.
    #[error("product {0} has no stock: POST /admin/reset sets it")]
    UnknownProduct(String),

    /// 404: no such order, in the database or (with `product=`) in Redis.
    #[error("order {0} is not known")]
    UnknownOrder(String),

    /// 410: the order's time to pay ran out before the payment: its unit went back to the
    /// stock (the payment lost the race, or came late).
    #[error("order {0} expired unpaid: its unit went back on sale")]
    Expired(String),

    /// 409: the order was sold with no payment window: there is nothing to pay.
    #[error("order {0} was sold outright: nothing to pay")]
    NotReserved(String),

    /// 409: the request conflicts with what is under way (a lesson already running).
    #[error("{0}")]
    Conflict(String),

    /// 422: an `Idempotency-Key` already used with another request (another variant,
    /// product, buyer or knob); the first request's answer stands.
    #[error("Idempotency-Key {0} was first used with another request: {1}")]
    KeyReused(String, String),

    /// 401: admin with a token configured, and the request did not carry it.
    #[error("admin needs Authorization: Bearer <token>")]
    Unauthorized,

    /// 403: admin without a configured token, asked from a non-loopback peer.
    #[error("admin answers loopback peers only (or start the instance with --admin-token)")]
    Forbidden,

    /// Turned away at the sale's front door (`crate::admission`): 409 `sold_out` from an
    /// instance's sold-out flag, 403 `no_pass` / `pass_refused` at a waiting room, 429
    /// `rate_limited` past a buyer's rate (with `Retry-After`).
    #[error("{message}")]
    TurnedAway {
        why: crate::outcome::TurnedAway,
        message: String,
        retry_after_s: Option<u64>,
    },

    /// 503: Redis did not answer in time, refused, or dropped the connection.
    #[error("redis unavailable")]
    RedisUnavailable(#[source] RedisError),

    /// 503: the ZooKeeper ensemble cannot be reached in time, is electing a leader (no
    /// quorum answers), or ended the instance's session: no lock can be had or freed now.
    #[error("lock store unavailable: {0}")]
    LockStoreUnavailable(String),

    /// 503: PostgreSQL (the `pg_*` variants' lock or stock store) refused, did not answer
    /// in time, or dropped the connection before anything was sent or while nothing could
    /// have changed. Nothing was sold.
    #[error("database unavailable: {0}")]
    DatabaseUnavailable(String),

    /// 503: the instance was not started with what this needs (the text says what).
    #[error("{0}")]
    NotConfigured(String),

    /// 500: a line of `deduct.lua` (which fails alone) failed, before it wrote anything or
    /// on a write after its sales were made: what the sale came to is looked up, as for a
    /// lost answer, and this is the answer only once the sale is known not to have run.
    #[error("internal error")]
    ScriptFailed(#[source] RedisError),

    /// 500: anything else. Logged here, answered with a generic message.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl AppError {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::UnknownVariant(..) | Self::UnknownProduct(_) | Self::UnknownOrder(_) => {
                StatusCode::NOT_FOUND
            }
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Conflict(_) | Self::NotReserved(_) => StatusCode::CONFLICT,
            Self::Expired(_) => StatusCode::GONE,
            Self::KeyReused(..) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::TurnedAway { why, .. } => why.status(),
            Self::RedisUnavailable(_)
            | Self::LockStoreUnavailable(_)
            | Self::DatabaseUnavailable(_)
            | Self::NotConfigured(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::ScriptFailed(_) | Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The outcome label used in responses and metrics.
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "bad_request",
            Self::UnknownVariant(..) => "unknown_variant",
            Self::UnknownProduct(_) => "unknown_product",
            Self::UnknownOrder(_) => "unknown_order",
            Self::Unauthorized => "unauthorized",
            Self::Conflict(_) => "under_way",
            Self::Expired(_) => "expired",
            Self::NotReserved(_) => "not_reserved",
            Self::KeyReused(..) => "key_reused",
            Self::Forbidden => "forbidden",
            Self::TurnedAway { why, .. } => why.name(),
            Self::RedisUnavailable(_) => "redis_unavailable",
            Self::LockStoreUnavailable(_) => "lock_store_unavailable",
            Self::DatabaseUnavailable(_) => "database_unavailable",
            Self::NotConfigured(_) => "not_configured",
            Self::ScriptFailed(_) | Self::Internal(_) => "error",
        }
    }
}

impl AppError {
    /// Whether the command this error answered may have run all the same: it was sent, and
    /// its answer was lost — a timeout, or a connection that dropped once it was sent — or
    /// it was a sale's script that failed after it may have written
    /// ([`AppError::ScriptFailed`]). Not when the connection could not be had (refused, a
    /// TLS handshake that failed), nor when Redis answered any other error: then the answer
    /// is what happened.
    pub fn answer_may_be_lost(&self) -> bool {
        match self {
            Self::RedisUnavailable(err) => {
                err.is_timeout() || (err.is_connection_dropped() && !err.is_connection_refusal())
            }
            Self::ScriptFailed(_) => true,
            _ => false,
        }
    }
}

impl From<RedisError> for AppError {
    fn from(err: RedisError) -> Self {
        if is_unavailable(&err) {
            Self::RedisUnavailable(err)
        } else {
            Self::Internal(err.into())
        }
    }
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        match err {
            // The lock's servers are away: as unavailable as Redis itself.
            LockError::NoQuorum { .. } => {
                tracing::warn!(error = %err, "lock unavailable");
                Self::RedisUnavailable(RedisError::from((
                    ErrorKind::Io,
                    "redlock: fewer than a quorum of servers answered",
                )))
            }
            err @ (LockError::Unavailable { .. } | LockError::Store { .. }) => {
                let message = err.to_string();
                match err
                    .into_source()
                    .map(|source| source.downcast::<RedisError>())
                {
                    // Redis's own error, classified as every Redis error is.
                    Some(Ok(redis)) => (*redis).into(),
                    // ZooKeeper's.
                    _ => {
                        tracing::warn!(error = %message, "lock store unavailable");
                        Self::LockStoreUnavailable(message)
                    }
                }
            }
            err => Self::Internal(err.into()),
        }
    }
}

/// Errors that mean "Redis is not there right now" rather than "we sent it something wrong".
fn is_unavailable(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_cluster_error()
        || matches!(
            err.kind(),
            ErrorKind::AuthenticationFailed
                | ErrorKind::ClusterConnectionNotFound
                // During a failover the sentinels still name the dead master, whose role
                // check fails: no master for now.
                | ErrorKind::MasterNameNotFoundBySentinel
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                )
        )
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = match &self {
            Self::UnknownVariant(_, variants) => json!({
                "outcome": self.outcome(),
                "error": self.to_string(),
                "variants": variants,
            }),
            Self::RedisUnavailable(err) => {
                tracing::warn!(error = %err, "redis unavailable");
                json!({ "outcome": self.outcome(), "error": self.to_string() })
            }
            Self::Internal(err) => {
                tracing::error!(error = ?err, "internal error");
                json!({ "outcome": self.outcome(), "error": self.to_string() })
            }
            Self::ScriptFailed(err) => {
                tracing::error!(error = ?err, "a sale's script failed");
                json!({ "outcome": self.outcome(), "error": self.to_string() })
            }
            _ => json!({ "outcome": self.outcome(), "error": self.to_string() }),
        };
        let mut response = (status, Json(body)).into_response();
        let retry_after = match &self {
            Self::TurnedAway { retry_after_s, .. } => *retry_after_s,
            _ if status == StatusCode::SERVICE_UNAVAILABLE => Some(1),
            _ => None,
        };
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from(seconds));
        }
        response
    }
}
