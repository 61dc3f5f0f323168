//! Ports for servers that cannot bind port 0 and say which port they got (redis-server,
//! sentinels, Nginx): a candidate that is free now, and a start that tries again on
//! another when the server finds it taken after all.
//!
//! Every candidate lies below the kernel's ephemeral range (`ip_local_port_range`): tests
//! kill servers and start them again on the same port, and a port in that range may have
//! become, in between, the local end of some other test's outgoing connection (a load of
//! 2,000 clients takes thousands of them), so the restarted server could not bind it.

use std::net::TcpListener;
use std::ops::Range;

/// How many candidates a start tries before it gives up.
pub const TRIES: usize = 8;

/// A loopback port nobody listens on right now, outside the ephemeral range.
pub fn candidate() -> u16 {
    free_base(1, &[0])
}

/// A port for a Cluster node, both it and its bus port (port + 10000) free now and outside
/// the ephemeral range.
pub fn cluster_candidate() -> u16 {
    free_base(10_001, &[0, 10_000])
}

/// A base port such that `base + offset` is free for every offset in `offsets`, each below
/// the ephemeral range; `span` is one more than the largest offset.
pub fn free_base(span: u16, offsets: &[u16]) -> u16 {
    let Range { start, end } = unreserved();
    let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
    for _ in 0..1_000 {
        let base = fastrand::u16(start..end - span);
        if offsets.iter().all(|&offset| free(base + offset)) {
            return base;
        }
    }
    panic!("no free ports below the ephemeral range ({start}..{end})");
}

/// Ports no outgoing connection takes: from 10000 to the start of the kernel's ephemeral
/// range (32768 when it cannot be read).
fn unreserved() -> Range<u16> {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .filter(|&low| low > 20_000)
        .unwrap_or(32_768);
    10_000..ephemeral_start
}

/// Whether a server's log (or error output) says it could not bind its port.
pub fn bind_failed(log: &str) -> bool {
    log.contains("Address already in use")
}

/// Runs `start` on candidate ports from `candidates` until one binds: `start` returns
/// `Ok` with the server, or `Err(true)` when the port was taken (try another), or
/// `Err(false)` for any other failure, which it has already explained by panicking or
/// printing.
pub fn start_on_a_free_port<T>(
    what: &str,
    mut candidates: impl FnMut() -> u16,
    mut start: impl FnMut(u16) -> Result<T, bool>,
) -> T {
    for _ in 0..TRIES {
        match start(candidates()) {
            Ok(server) => return server,
            Err(true) => continue,
            Err(false) => break,
        }
    }
    panic!("{what} did not start (see its log above)");
}
