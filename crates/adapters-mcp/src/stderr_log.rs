//! A stdio tool server's stderr, into the log: each line at WARN as `mcp_server_stderr`, tagged
//! with the server's name, at most [`LINES_PER_MINUTE`] lines a minute (the rest counted and
//! reported once the minute ends) and each cut at [`MAX_LINE_CHARS`], so a chatty or hostile
//! server cannot flood the log.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::time::Instant;

/// Lines logged per server per minute.
pub(crate) const LINES_PER_MINUTE: u32 = 60;

/// The longest line logged, in characters.
pub(crate) const MAX_LINE_CHARS: usize = 2_000;

/// The longest line read, in bytes; a longer one is read in pieces.
const MAX_LINE_BYTES: usize = 64 * 1024;

/// Logs `stderr` of `server` until it closes.
pub(crate) async fn forward(server: String, stderr: impl AsyncRead + Unpin) {
    let mut lines = BufReader::with_capacity(MAX_LINE_BYTES, stderr);
    let mut window = Instant::now();
    let mut logged = 0_u32;
    let mut dropped = 0_u64;
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match (&mut lines)
            .take(MAX_LINE_BYTES as u64)
            .read_until(b'\n', &mut buffer)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if window.elapsed() >= Duration::from_secs(60) {
            if dropped > 0 {
                tracing::warn!(event = "mcp_server_stderr_suppressed", server = %server, lines = dropped, "a tool server wrote more to stderr than is logged");
            }
            window = Instant::now();
            logged = 0;
            dropped = 0;
        }
        if logged >= LINES_PER_MINUTE {
            dropped += 1;
            continue;
        }
        logged += 1;
        let text = String::from_utf8_lossy(&buffer);
        let line: String = text.trim_end().chars().take(MAX_LINE_CHARS).collect();
        if !line.is_empty() {
            tracing::warn!(event = "mcp_server_stderr", server = %server, line = %line);
        }
    }
    if dropped > 0 {
        tracing::warn!(event = "mcp_server_stderr_suppressed", server = %server, lines = dropped, "a tool server wrote more to stderr than is logged");
    }
}
