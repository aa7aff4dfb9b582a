//! Tools: each configured MCP tool server as the gateway sees it now — up or why not, how many
//! tools, its sandbox, and its tools counted by the class the gate gives them (the server's own
//! hints, or its entry's `classify`, never looser), so a person sees what an agent may call
//! unattended before it does.

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;
use metaforge_app::tools::ServerStatus;
use metaforge_domain::tool_gating::Annotation;

use super::ConsoleState;
use super::page::{self, Nav};
use super::session::ConsoleUser;

/// `GET /tools`.
pub(crate) async fn page(
    State(console): State<Arc<ConsoleState>>,
    Extension(user): Extension<ConsoleUser>,
) -> Response {
    let statuses = &console.gateway.mcp_servers;
    let servers = statuses.snapshot();
    let sandboxes = statuses.sandboxes();
    let classes = statuses.classes();
    page::html(
        StatusCode::OK,
        page::shell(
            &user,
            Nav::Tools,
            "Tools",
            html! {
                p.small {
                    "The MCP tool servers of the servers file. A tool its server does not annotate counts as destructive: an automated phase may not call it and a chat holds each call, unless the server's entry classifies it (read_only, producing, destructive — never looser than the server says)."
                }
                table {
                    caption { "Tool servers" }
                    thead { tr {
                        th scope="col" { "Server" } th scope="col" { "Status" } th scope="col" { "Tools" }
                        th scope="col" { "Sandbox" }
                        @for class in Annotation::ALL { th scope="col" { (class.as_str().replace('_', " ")) } }
                    } }
                    tbody {
                        @if servers.is_empty() { tr { td colspan=(4 + Annotation::ALL.len()) { "No tool server is configured." } } }
                        @for (name, status) in &servers {
                            tr {
                                th scope="row" { (name) }
                                td {
                                    span class=(format!("badge {}", status.as_str())) { (status.as_str()) }
                                    @if let ServerStatus::Unavailable { reason } = status { br; span.small { (reason) } }
                                }
                                td { @match status { ServerStatus::Ok { tools } => (tools), ServerStatus::Unavailable { .. } | ServerStatus::Disabled => "—" } }
                                td { (sandboxes.get(name).copied().unwrap_or("—")) }
                                @for class in Annotation::ALL {
                                    td { (classes.get(name).and_then(|c| c.get(class.as_str())).copied().unwrap_or(0)) }
                                }
                            }
                        }
                    }
                }
            },
        ),
    )
}
