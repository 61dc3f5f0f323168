//! The ids a request names that end up inside Redis keys and hash fields: products,
//! buyers, idempotency keys. Each is parsed once, at the edge, from a narrow alphabet, so
//! none can open another hash tag or reach another product's keys.

use std::fmt;

/// A product id that is safe to put inside a Redis key: `[A-Za-z0-9_-]{1,64}`.
///
/// Braces, colons, slashes and whitespace are refused, so a product id can never open
/// another hash tag or reach another product's keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProductId(String);

impl ProductId {
    pub const MAX_LEN: usize = 64;

    pub fn parse(raw: &str) -> Result<Self, String> {
        let valid_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if raw.is_empty() || raw.len() > Self::MAX_LEN || !raw.chars().all(valid_char) {
            return Err(format!(
                "product must match [A-Za-z0-9_-]{{1,{}}}",
                Self::MAX_LEN
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProductId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A buyer's id, safe inside a Redis key or a hash field: `[A-Za-z0-9_-]{1,64}`, as a
/// product id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserId(String);

impl UserId {
    pub fn parse(raw: &str) -> Result<Self, String> {
        ProductId::parse(raw)
            .map(|id| Self(id.0))
            .map_err(|_| format!("user must match [A-Za-z0-9_-]{{1,{}}}", ProductId::MAX_LEN))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An idempotency key, from the `Idempotency-Key` header (the IETF httpapi draft's): safe
/// inside a Redis key and a hash field, `[A-Za-z0-9_.:-]{1,128}` — a UUID, a ULID, or the
/// client's own order reference. The draft sends it as a quoted string; the quotes are
/// taken off, and a bare value is taken too.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub const MAX_LEN: usize = 128;

    pub fn parse(raw: &str) -> Result<Self, String> {
        let inner = raw
            .strip_prefix('"')
            .and_then(|r| r.strip_suffix('"'))
            .unwrap_or(raw);
        let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
        if inner.is_empty() || inner.len() > Self::MAX_LEN || !inner.chars().all(valid_char) {
            return Err(format!(
                "Idempotency-Key must match [A-Za-z0-9_.:-]{{1,{}}} (optionally in double quotes)",
                Self::MAX_LEN
            ));
        }
        Ok(Self(inner.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_ids_cannot_smuggle_keys() {
        for bad in [
            "",
            "a}b",
            "{101}",
            "1 0",
            "a:b",
            "a/b",
            "é",
            "a\r\nb",
            &"x".repeat(65),
        ] {
            assert!(ProductId::parse(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["101", "sku_9-A", &"x".repeat(64)] {
            assert!(ProductId::parse(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn idempotency_keys_cannot_smuggle_keys() {
        for bad in [
            "",
            "\"\"",
            "a}b",
            "{k}",
            "a b",
            "a/b",
            "é",
            "a\r\nb",
            &"k".repeat(129),
        ] {
            assert!(IdempotencyKey::parse(bad).is_err(), "{bad:?} accepted");
        }
        let uuid = "0193a6f2-6f5e-7c3a-9a1b-3f2e1d0c9b8a";
        assert_eq!(IdempotencyKey::parse(uuid).unwrap().as_str(), uuid);
        assert_eq!(
            IdempotencyKey::parse("\"k:1.a\"").unwrap().as_str(),
            "k:1.a"
        );
    }
}
