//! Loopback addresses for tests. A server under test is handed a listener that is already bound
//! ([`listener`], [`tokio_listener`]), so no other test can take its port between "find" and
//! "bind". Only a child process that must bind its own port is told a number, through
//! [`unused_port`], the one place that races.

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// A listener bound to `127.0.0.1:0`; hand it to the server under test and read its address with
/// `local_addr()`.
#[expect(
    clippy::expect_used,
    reason = "test support: no loopback port is a broken machine"
)]
#[must_use]
pub fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener")
}

/// [`listener`] for tokio servers (axum, hand-written upstreams).
#[expect(
    clippy::expect_used,
    reason = "test support: no loopback port is a broken machine"
)]
pub async fn tokio_listener() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback listener")
}

/// A loopback port nothing listens on right now: for a child process that must be told its port
/// before it binds it (aimock, Steady, redis, a `metaforge` sidecar), or for an address that must
/// refuse connections. This is the only place a test takes a port number without keeping it bound.
#[must_use]
pub fn unused_port() -> u16 {
    listener().local_addr().map_or(0, |addr: SocketAddr| addr.port())
}

/// Waits until `addr` accepts TCP connections; true when it did within `within`.
pub fn wait_listening(addr: impl ToSocketAddrs, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if TcpStream::connect(&addr).is_ok() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
