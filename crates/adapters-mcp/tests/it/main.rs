//! The MCP adapter's integration tests, one binary (each former `tests/*.rs` is a module here):
//! the client against server-everything, and the sidecar's streamable HTTP transport.

mod server_everything;
mod servers_file;
mod sidecar_transport;
