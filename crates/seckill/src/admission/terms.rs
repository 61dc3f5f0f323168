//! A sale's front-door terms: what a reset opens it with ([`Opening`]), and what each
//! instance reads back from the product's meta and keeps ([`DoorTerms`]).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Bounds of the terms a reset may set.
pub const MAX_ROOM_RATE: u32 = 100_000;
pub const MIN_PASS_TTL_MS: u64 = 100;
pub const MAX_PASS_TTL_MS: u64 = 600_000;
pub const MAX_LIMIT_PER_S: u32 = 10_000;

/// `waiting_room` at reset: buyers take a number and are let in `rate_per_s` a second, in
/// order; each admitted buyer gets a pass good for `pass_ttl_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomTerms {
    pub rate_per_s: u32,
    pub pass_ttl_ms: u64,
}

/// `rate_limit` at reset: each buyer's deductions, `per_s` a second with bursts of
/// `burst` (default: `per_s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitTerms {
    pub per_s: u32,
    #[serde(default)]
    pub burst: u32,
}

/// `sold_out_flag` at reset: whether an instance that saw the product sold out answers 409
/// from memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flag {
    /// Every request asks the stock.
    #[default]
    Off,
    /// Answered from memory, and forgotten when a unit may be back: a reset, a reopen, an
    /// expired reservation giving its unit back (each sends a notice), and at the latest
    /// when the terms are read again ([`super::TERMS_MAX_AGE`]).
    On,
    /// The flag most flash-sale demos keep (a static map, set once): forgotten only when
    /// a reset starts another sale. A unit that comes back is never sold: the lesson.
    Sticky,
}

/// What a reset opens the front door with; the default is a door wide open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Opening {
    pub room: Option<RoomTerms>,
    pub limit: Option<LimitTerms>,
    pub flag: Flag,
}

impl Opening {
    /// A door that lets every request through to the stock (the default).
    pub const fn is_wide_open(&self) -> bool {
        self.room.is_none() && self.limit.is_none() && matches!(self.flag, Flag::Off)
    }

    /// The terms checked against their bounds (a clear message when one is out).
    pub fn checked(mut self) -> Result<Self, String> {
        if let Some(room) = self.room {
            if !(1..=MAX_ROOM_RATE).contains(&room.rate_per_s) {
                return Err(format!(
                    "waiting_room.rate_per_s must be from 1 to {MAX_ROOM_RATE}"
                ));
            }
            if !(MIN_PASS_TTL_MS..=MAX_PASS_TTL_MS).contains(&room.pass_ttl_ms) {
                return Err(format!(
                    "waiting_room.pass_ttl_ms must be from {MIN_PASS_TTL_MS} to {MAX_PASS_TTL_MS}"
                ));
            }
        }
        if let Some(limit) = &mut self.limit {
            if !(1..=MAX_LIMIT_PER_S).contains(&limit.per_s) {
                return Err(format!(
                    "rate_limit.per_s must be from 1 to {MAX_LIMIT_PER_S}"
                ));
            }
            if limit.burst == 0 {
                limit.burst = limit.per_s;
            }
            if limit.burst > MAX_LIMIT_PER_S {
                return Err(format!(
                    "rate_limit.burst must be from 1 to {MAX_LIMIT_PER_S}"
                ));
            }
        }
        Ok(self)
    }

    /// The meta fields a reset writes (every one, so that no term of an earlier sale
    /// stays): `opened_at_ms` is the sale's opening on the wall clock, `key` the room's
    /// signing key, fresh for each sale.
    pub fn meta_fields(&self, opened_at_ms: i64, key: &str) -> Vec<(&'static str, String)> {
        let room = self.room.map_or((0, 0), |r| (r.rate_per_s, r.pass_ttl_ms));
        let limit = self.limit.map_or((0, 0), |l| (l.per_s, l.burst));
        vec![
            ("room_rate_per_s", room.0.to_string()),
            ("room_pass_ttl_ms", room.1.to_string()),
            ("opened_at_ms", opened_at_ms.to_string()),
            ("room_key", key.to_owned()),
            ("limit_per_s", limit.0.to_string()),
            ("limit_burst", limit.1.to_string()),
            ("sold_out_flag", self.flag.name().to_owned()),
        ]
    }
}

impl Flag {
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::On => "on",
            Self::Sticky => "sticky",
        }
    }

    fn of_name(name: &str) -> Self {
        match name {
            "on" => Self::On,
            "sticky" => Self::Sticky,
            _ => Self::Off,
        }
    }
}

/// The meta fields [`DoorTerms::from_meta`] reads.
pub const META_FIELDS: [&str; 9] = [
    "epoch",
    "room_rate_per_s",
    "room_pass_ttl_ms",
    "opened_at_ms",
    "room_key",
    "limit_per_s",
    "limit_burst",
    "sold_out_flag",
    "stock_in",
];

/// A product's front door, as an instance knows it.
#[derive(Debug, Clone, Default)]
pub struct DoorTerms {
    /// The sale (0: the product was never reset).
    pub epoch: i64,
    /// When the sale opened (its reset), on the wall clock, ms.
    pub opened_at_ms: i64,
    pub room: Option<Room>,
    pub limit: Option<LimitTerms>,
    pub flag: Flag,
    pub in_database: bool,
}

/// A waiting room's terms, with what checks its tickets and passes.
#[derive(Debug, Clone)]
pub struct Room {
    pub rate_per_s: u32,
    pub pass_ttl_ms: u64,
    pub opened_at_ms: i64,
    pub key: Vec<u8>,
}

impl DoorTerms {
    /// From the values of [`META_FIELDS`], in order (`None` where the meta has none).
    pub fn from_meta(values: &[Option<String>]) -> Self {
        let fields: HashMap<&str, &str> = META_FIELDS
            .iter()
            .zip(values)
            .filter_map(|(name, value)| Some((*name, value.as_deref()?)))
            .collect();
        let number = |name: &str| fields.get(name).and_then(|v| v.parse::<i64>().ok());
        let epoch = number("epoch").unwrap_or(0);
        let rate = number("room_rate_per_s").unwrap_or(0);
        let key = fields.get("room_key").and_then(|k| hex_decode(k));
        let room = match key {
            Some(key) if rate > 0 && key.len() >= 16 => Some(Room {
                rate_per_s: u32::try_from(rate).unwrap_or(u32::MAX),
                pass_ttl_ms: u64::try_from(number("room_pass_ttl_ms").unwrap_or(0)).unwrap_or(0),
                opened_at_ms: number("opened_at_ms").unwrap_or(0),
                key,
            }),
            _ => None,
        };
        let per_s = u32::try_from(number("limit_per_s").unwrap_or(0)).unwrap_or(0);
        let burst = u32::try_from(number("limit_burst").unwrap_or(0)).unwrap_or(0);
        Self {
            epoch,
            opened_at_ms: number("opened_at_ms").unwrap_or(0),
            room,
            limit: (per_s > 0).then_some(LimitTerms {
                per_s,
                burst: burst.max(1),
            }),
            flag: fields
                .get("sold_out_flag")
                .map_or(Flag::Off, |f| Flag::of_name(f)),
            in_database: fields.get("stock_in") == Some(&"postgres"),
        }
    }

    /// Which sale these terms are of: its epoch and its opening. A reset raises the epoch
    /// first and writes the door last (after the stock): terms read in between carry the
    /// new epoch with the old opening, and a sold-out seen through them is not this sale's.
    pub fn sale(&self) -> (i64, i64) {
        (self.epoch, self.opened_at_ms)
    }

    /// Whether a deduction passes this door without a check.
    pub fn wide_open(&self) -> bool {
        self.room.is_none() && self.limit.is_none() && self.flag == Flag::Off
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_read_back_what_a_reset_wrote() {
        let opening = Opening {
            room: Some(RoomTerms {
                rate_per_s: 100,
                pass_ttl_ms: 5_000,
            }),
            limit: Some(LimitTerms { per_s: 5, burst: 0 }),
            flag: Flag::Sticky,
        }
        .checked()
        .unwrap();
        let key = hex(&[7; 32]);
        let written = opening.meta_fields(1_000, &key);
        let values: Vec<Option<String>> = META_FIELDS
            .iter()
            .map(|name| match *name {
                "epoch" => Some("3".to_owned()),
                name => written
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.clone()),
            })
            .collect();
        let terms = DoorTerms::from_meta(&values);
        assert_eq!(terms.epoch, 3);
        let room = terms.room.clone().expect("a room");
        assert_eq!(
            (room.rate_per_s, room.pass_ttl_ms, room.opened_at_ms),
            (100, 5_000, 1_000)
        );
        assert_eq!(room.key, vec![7; 32]);
        assert_eq!(terms.limit, Some(LimitTerms { per_s: 5, burst: 5 }));
        assert_eq!(terms.flag, Flag::Sticky);
        assert!(!terms.wide_open());
        let open = Opening::default().meta_fields(1_000, "");
        let values: Vec<Option<String>> = META_FIELDS
            .iter()
            .map(|name| open.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()))
            .collect();
        assert!(
            DoorTerms::from_meta(&values).wide_open(),
            "a reset without terms opens the door"
        );
    }

    #[test]
    fn terms_out_of_bounds_are_refused() {
        let room = |rate_per_s, pass_ttl_ms| Opening {
            room: Some(RoomTerms {
                rate_per_s,
                pass_ttl_ms,
            }),
            ..Opening::default()
        };
        assert!(room(0, 1_000).checked().is_err());
        assert!(room(MAX_ROOM_RATE + 1, 1_000).checked().is_err());
        assert!(room(10, MIN_PASS_TTL_MS - 1).checked().is_err());
        assert!(room(10, MAX_PASS_TTL_MS + 1).checked().is_err());
        assert!(room(10, 1_000).checked().is_ok());
        let limit = |per_s, burst| Opening {
            limit: Some(LimitTerms { per_s, burst }),
            ..Opening::default()
        };
        assert!(limit(0, 0).checked().is_err());
        assert!(limit(5, MAX_LIMIT_PER_S + 1).checked().is_err());
        assert_eq!(limit(5, 0).checked().unwrap().limit.unwrap().burst, 5);
    }
}
