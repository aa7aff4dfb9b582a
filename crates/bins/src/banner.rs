//! Start-up banners: the lines a server prints on stdout for whoever started it.

use std::io::Write;

/// Writes `line` and a newline to stdout and flushes. An error is ignored on purpose: a server
/// must keep serving after whoever started it stops reading its stdout. `println!` would panic
/// on the closed pipe and take the gateway down with it.
pub(crate) fn announce(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}
