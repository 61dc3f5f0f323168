//! Reading one knob's value from a request's text, within its bounds, and the 400s that
//! say what was wrong.

use std::time::Duration;

use super::Limits;
use super::{Kind, Knob, Value};
use crate::error::AppError;
use crate::keys::ProductId;

/// One knob's value from the request's text, or its default.
pub(super) fn read(knob: &Knob, raw: Option<&str>, limits: &Limits) -> Result<Value, AppError> {
    Ok(match knob.kind {
        Kind::Millis { min, max, default } => {
            let max = max(limits);
            match raw {
                None => Value::Millis(default.map(|ms| Duration::from_millis(ms.min(max)))),
                Some(raw) => match raw.parse::<u64>() {
                    Ok(ms) if (min..=max).contains(&ms) && raw.len() <= 20 => {
                        Value::Millis(Some(Duration::from_millis(ms)))
                    }
                    _ => {
                        return Err(bad(format!(
                            "{} must be a whole number of milliseconds from {min} to {max}, got {}",
                            knob.name,
                            quoted(raw)
                        )));
                    }
                },
            }
        }
        Kind::Switch { default } => Value::Switch(match raw {
            None => default,
            Some("on") => true,
            Some("off") => false,
            Some(other) => {
                return Err(bad(format!(
                    "{} must be on or off, got {}",
                    knob.name,
                    quoted(other)
                )));
            }
        }),
        Kind::Count { min, max } => Value::Count(match raw {
            None => None,
            Some(raw) => match raw.parse::<i64>() {
                Ok(n) if (min..=max).contains(&n) && raw.len() <= 20 => Some(n),
                _ => {
                    return Err(bad(format!(
                        "{} must be a whole number from {min} to {max}, got {}",
                        knob.name,
                        quoted(raw)
                    )));
                }
            },
        }),
        Kind::Products { max } => Value::Products(match raw {
            None => Vec::new(),
            Some(raw) => products(knob.name, raw, max)?,
        }),
        Kind::Choice { values } => Value::Choice(match raw {
            None => None,
            Some(raw) => match values.iter().find(|v| **v == raw) {
                Some(value) => Some(*value),
                None => {
                    return Err(bad(format!(
                        "{} {} is not one of: {}",
                        knob.name,
                        quoted(raw),
                        values.join(", ")
                    )));
                }
            },
        }),
    })
}

/// `101,102,103`: distinct product ids, at least one, at most `max`.
fn products(name: &str, raw: &str, max: usize) -> Result<Vec<ProductId>, AppError> {
    let mut products: Vec<ProductId> = Vec::new();
    for part in raw.split(',') {
        if products.len() == max {
            return Err(bad(format!("{name} takes at most {max} products")));
        }
        let product = ProductId::parse(part).map_err(|err| bad(format!("{name}: {err}")))?;
        if products.contains(&product) {
            return Err(bad(format!("{name} names product {} twice", quoted(part))));
        }
        products.push(product);
    }
    Ok(products)
}

pub(super) fn bad(message: String) -> AppError {
    AppError::BadRequest(message)
}

/// A client's text, quoted and cut short, for an error message.
pub(super) fn quoted(raw: &str) -> String {
    const MAX: usize = 40;
    let cut: String = raw.chars().take(MAX).collect();
    if cut.len() < raw.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}
