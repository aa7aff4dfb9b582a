//! The wrong-key throttle both doors share (the gateway's API and console sign-in, the MCP
//! sidecar): one count per client address, so an address cannot double its guesses by switching
//! doors.
//!
//! Only a wrong key is counted and only a wrong key is refused 429: a valid key is admitted from
//! any address, so one bad client behind a shared proxy (or on loopback) cannot lock out the
//! people it shares the address with.

use std::net::IpAddr;

/// What a door answers a wrong key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrongKeyVerdict {
    /// 401: the address has attempts left in this window.
    Unauthorized,
    /// 429 with `Retry-After`: the address used up its wrong-key attempts for this window.
    Throttled {
        /// Seconds until the window ends.
        retry_after_secs: u64,
        /// This attempt used the window up (log it once, not per refused attempt).
        just_now: bool,
    },
}

/// Counts wrong keys per client address.
pub trait AuthFailures: Send + Sync {
    /// Records one wrong key from `client` and says how to answer it.
    fn wrong_key(&self, client: IpAddr) -> WrongKeyVerdict;
}
