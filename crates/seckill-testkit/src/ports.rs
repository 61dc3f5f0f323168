//! Ports for servers that cannot bind port 0 and say which port they got (redis-server,
//! sentinels, Nginx): a candidate that is free now, and a start that tries again on
//! another when the server finds it taken after all.

use std::net::TcpListener;

/// How many candidates a start tries before it gives up.
pub const TRIES: usize = 8;

/// A loopback port nobody listens on right now.
pub fn candidate() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A port for a Cluster node: at most 55535 (its bus port is port + 10000), both free now.
pub fn cluster_candidate() -> u16 {
    for _ in 0..1_000 {
        let port = fastrand::u16(20_000..=45_000);
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
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
