//! The MCP adapter's integration tests, one binary (each former `tests/*.rs` is a module here):
//! the client against server-everything, and the sidecar's streamable HTTP transport.

mod sandbox;
mod server_everything;
mod servers_file;
mod sidecar_transport;

use std::sync::Arc;

use metaforge_adapters_mcp::StdioLaunch;

/// What a stdio server a test starts gets: this process's `PATH`, and a directory of its own
/// under the system's temporary directory.
pub(crate) fn launch() -> Arc<StdioLaunch> {
    Arc::new(StdioLaunch::new(
        [("PATH".to_owned(), metaforge_test_support::peers::path())],
        std::env::temp_dir().join(format!("metaforge-mcp-it-{}", std::process::id())),
    ))
}
