//! The waiting room's numbers and papers: a buyer's ticket (its place, taken with one
//! `INCR` in `lua/admission/ticket.lua`), the serving number (a function of the sale's
//! opening time and the rate, so no instance has to raise it), and the pass an admitted
//! buyer shows at the deduction.
//!
//! Tickets and passes are signed with the sale's key (HMAC-SHA256, cut to 128 bits), bound
//! to the product, the buyer and the sale: any instance checks one from memory, without
//! Redis, and a buyer cannot forge one, use another's, or keep one past its time or into
//! the next sale (whose key is another). As AWS's Virtual Waiting Room does, the order is
//! kept by a counter in Redis and the rate by the serving number; as Cloudflare's does,
//! a buyer keeps the place of its first arrival.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::terms::{Room, hex, hex_decode};

/// Bytes of the signature a token carries.
const TAG_BYTES: usize = 16;
/// The longest token read: `epoch.value.signature`.
pub const MAX_TOKEN_LEN: usize = 20 + 1 + 20 + 1 + 2 * TAG_BYTES;

/// Why a ticket or pass is not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not `epoch.value.signature`.
    Malformed,
    /// Of an earlier (or later) sale of the product.
    OtherSale,
    /// The signature does not match this product and buyer: forged, or another's.
    NotYours,
    /// A pass whose time ran out.
    Expired,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Self::Malformed => "it is not a token this service gave out",
            Self::OtherSale => "it belongs to another sale of this product",
            Self::NotYours => "its signature does not match this product and buyer",
            Self::Expired => "its time ran out",
        }
    }
}

/// What a token says, once its signature is checked.
struct Token {
    epoch: i64,
    value: i64,
    tag: Vec<u8>,
}

fn parse(token: &str) -> Option<Token> {
    if token.len() > MAX_TOKEN_LEN {
        return None;
    }
    let mut parts = token.split('.');
    let (epoch, value, tag) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.len() <= 19 && s.bytes().all(|b| b.is_ascii_digit());
    if parts.next().is_some() || !digits(epoch) || !digits(value) || tag.len() != 2 * TAG_BYTES {
        return None;
    }
    Some(Token {
        epoch: epoch.parse().ok()?,
        value: value.parse().ok()?,
        tag: hex_decode(tag)?,
    })
}

fn mac(room: &Room, kind: &str, product: &str, user: &str, epoch: i64, value: i64) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&room.key)
        .expect("HMAC takes a key of any length");
    // Every part is from a narrow alphabet without '|' (ids, numbers), so no two
    // different tokens sign the same text.
    mac.update(format!("{kind}|{product}|{user}|{epoch}|{value}").as_bytes());
    mac
}

fn token(room: &Room, kind: &str, product: &str, user: &str, epoch: i64, value: i64) -> String {
    let tag = mac(room, kind, product, user, epoch, value)
        .finalize()
        .into_bytes();
    format!("{epoch}.{value}.{}", hex(&tag[..TAG_BYTES]))
}

fn check(
    room: &Room,
    kind: &str,
    product: &str,
    user: &str,
    epoch: i64,
    token: &str,
) -> Result<i64, Refusal> {
    let token = parse(token).ok_or(Refusal::Malformed)?;
    let mac = mac(room, kind, product, user, token.epoch, token.value);
    // In constant time: the answer's timing says nothing of how much of a guess matched.
    mac.verify_truncated_left(&token.tag)
        .map_err(|_| Refusal::NotYours)?;
    if token.epoch != epoch {
        return Err(Refusal::OtherSale);
    }
    Ok(token.value)
}

/// Ticket number `number` of `user` in sale `epoch`.
pub fn ticket(room: &Room, product: &str, user: &str, epoch: i64, number: i64) -> String {
    token(room, "ticket", product, user, epoch, number)
}

/// The number on `user`'s ticket, if the ticket is theirs, of this product and sale.
pub fn read_ticket(
    room: &Room,
    product: &str,
    user: &str,
    epoch: i64,
    ticket: &str,
) -> Result<i64, Refusal> {
    check(room, "ticket", product, user, epoch, ticket)
}

/// A pass for `user`, good until `expires_at_ms` on the wall clock.
pub fn pass(room: &Room, product: &str, user: &str, epoch: i64, expires_at_ms: i64) -> String {
    token(room, "pass", product, user, epoch, expires_at_ms)
}

/// Whether `pass` lets `user` in at `now_ms`.
pub fn check_pass(
    room: &Room,
    product: &str,
    user: &str,
    epoch: i64,
    pass: &str,
    now_ms: i64,
) -> Result<(), Refusal> {
    let expires_at = check(room, "pass", product, user, epoch, pass)?;
    if expires_at <= now_ms {
        return Err(Refusal::Expired);
    }
    Ok(())
}

/// The highest number let in at `now_ms`: `rate_per_s` a second since the opening.
pub fn serving(room: &Room, now_ms: i64) -> i64 {
    let since = (now_ms - room.opened_at_ms).max(0);
    since.saturating_mul(i64::from(room.rate_per_s)) / 1_000
}

/// How long until `number` is let in, ms (0: it is).
pub fn wait_ms(room: &Room, number: i64, now_ms: i64) -> i64 {
    let rate = i64::from(room.rate_per_s);
    // The first instant at which serving(t) >= number.
    let at = room.opened_at_ms + (number.saturating_mul(1_000) + rate - 1) / rate;
    (at - now_ms).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room() -> Room {
        Room {
            rate_per_s: 100,
            pass_ttl_ms: 1_000,
            opened_at_ms: 10_000,
            key: vec![42; 32],
        }
    }

    #[test]
    fn a_ticket_is_its_buyers_own() {
        let room = room();
        let t = ticket(&room, "101", "alice", 3, 17);
        assert_eq!(read_ticket(&room, "101", "alice", 3, &t), Ok(17));
        assert_eq!(
            read_ticket(&room, "101", "bob", 3, &t),
            Err(Refusal::NotYours)
        );
        assert_eq!(
            read_ticket(&room, "102", "alice", 3, &t),
            Err(Refusal::NotYours)
        );
        assert_eq!(
            read_ticket(&room, "101", "alice", 4, &t),
            Err(Refusal::OtherSale)
        );
        let forged = t.replacen("3.17.", "3.1.", 1);
        assert_eq!(
            read_ticket(&room, "101", "alice", 3, &forged),
            Err(Refusal::NotYours)
        );
        let other_key = Room {
            key: vec![1; 32],
            ..room.clone()
        };
        assert_eq!(
            read_ticket(&other_key, "101", "alice", 3, &t),
            Err(Refusal::NotYours)
        );
        // A pass is not a ticket, nor the other way round.
        assert_eq!(
            check_pass(&room, "101", "alice", 3, &t, 0),
            Err(Refusal::NotYours)
        );
    }

    #[test]
    fn a_pass_is_good_until_its_time() {
        let room = room();
        let p = pass(&room, "101", "alice", 3, 5_000);
        assert_eq!(check_pass(&room, "101", "alice", 3, &p, 4_999), Ok(()));
        assert_eq!(
            check_pass(&room, "101", "alice", 3, &p, 5_000),
            Err(Refusal::Expired)
        );
        assert_eq!(
            check_pass(&room, "101", "bob", 3, &p, 0),
            Err(Refusal::NotYours)
        );
        for junk in [
            "",
            "x",
            "1.2",
            "1.2.3.4",
            "a.b.c",
            &"9".repeat(200),
            "1.2.zz",
        ] {
            assert_eq!(
                check_pass(&room, "101", "alice", 3, junk, 0),
                Err(Refusal::Malformed)
            );
        }
    }

    #[test]
    fn numbers_are_let_in_at_the_rate() {
        let room = room();
        assert_eq!(serving(&room, 9_000), 0);
        assert_eq!(serving(&room, 10_000), 0);
        assert_eq!(serving(&room, 10_010), 1);
        assert_eq!(serving(&room, 11_000), 100);
        for number in [1, 2, 99, 100, 101, 12_345] {
            let wait = wait_ms(&room, number, 10_000);
            assert!(serving(&room, 10_000 + wait) >= number, "{number}");
            assert!(serving(&room, 10_000 + wait - 1) < number, "{number}");
        }
        assert_eq!(wait_ms(&room, 1, 20_000), 0);
    }
}
