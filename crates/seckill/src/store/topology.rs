//! Where keys live on a Redis Cluster: slots, the masters that serve them, and the
//! `CLUSTER SLOTS` answer that says which.

use redis::Value;

/// One master of the store, and the slot ranges it serves.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Master {
    /// `host:port`, as the Cluster announces it.
    pub addr: String,
    pub slots: Vec<(u16, u16)>,
}

impl Master {
    pub fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|&(from, to)| (from..=to).contains(&slot))
    }
}

/// The master that serves `key`'s slot, if the list has it.
pub fn master_of<'a>(masters: &'a [Master], key: &str) -> Option<&'a Master> {
    let slot = key_slot(key.as_bytes());
    masters.iter().find(|m| m.serves(slot))
}

/// `CLUSTER SLOTS`: `[[from, to, [ip, port, id], replicas…], …]`, grouped by master.
pub(super) fn parse_cluster_slots(reply: Value) -> Vec<Master> {
    let mut masters: Vec<Master> = Vec::new();
    let Value::Array(ranges) = reply else {
        return masters;
    };
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let (Some(from), Some(to), Some(Value::Array(node))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let (Ok(from), Ok(to)) = (
            redis::from_redis_value_ref::<u16>(from),
            redis::from_redis_value_ref::<u16>(to),
        ) else {
            continue;
        };
        let (Some(host), Some(port)) = (node.first(), node.get(1)) else {
            continue;
        };
        let (Ok(host), Ok(port)) = (
            redis::from_redis_value_ref::<String>(host),
            redis::from_redis_value_ref::<u16>(port),
        ) else {
            continue;
        };
        let addr = format!("{host}:{port}");
        match masters.iter_mut().find(|m| m.addr == addr) {
            Some(master) => master.slots.push((from, to)),
            None => masters.push(Master {
                addr,
                slots: vec![(from, to)],
            }),
        }
    }
    for master in &mut masters {
        master.slots.sort_unstable();
    }
    masters.sort_by_key(|m| m.slots.first().map(|s| s.0));
    masters
}

/// `host:port` of a `redis://[user:pass@]host:port[/db]` URL.
pub(super) fn node_address(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// The Cluster slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key when it
/// has none, modulo 16384 — as Redis computes it.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(0) | None => key,
            Some(len) => &key[open + 1..open + 1 + len],
        },
        None => key,
    };
    crc16(hashed) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT on a real Redis 7.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"seckill:{101}:stock"), key_slot(b"101"));
        assert_eq!(key_slot(b"{}x"), key_slot(b"{}x"));
        assert_ne!(key_slot(b"{}x"), key_slot(b"x"));
    }

    #[test]
    fn node_addresses_drop_scheme_password_and_db() {
        assert_eq!(node_address("redis://127.0.0.1:7001"), "127.0.0.1:7001");
        assert_eq!(node_address("rediss://:pw@host:6380/2"), "host:6380");
    }
}
