//! An HTTP client of the gateway's own REST API (FORGE-406/462; issue 16 item 7).
//!
//! A sidecar started with `METAFORGE_GATEWAY_URL` must not keep a queue of its own: two queues
//! means a reviewer clearing one while the other fills. This crate implements the ports the
//! sidecar needs over the gateway's routes, so a held call parks in the gateway's ledger, a
//! plugin's proposal is the version the dashboard shows, and a run a plugin starts or a gate it
//! relays is the run `/v1/runs` lists ([`RemoteRunBindings`]). `metaforge chat` talks to a gateway's
//! chat threads through [`ChatClient`].
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## Sidecar remote mode (issue 7, item 4) — `adapters-gateway`, `metaforge_sidecar::bindings`, `bins mcp serve`
//!
//! - **Port** `api::flow_bindings::FlowBindings` (`propose(CallerProposal) -> ProposalAnswer`,
//!   `version(id) -> FlowVersionRecord`): `flow.propose`/`flow.version` answered in process
//!   (`metaforge_sidecar::InProcessFlowBindings`, over `FlowService`) or by the gateway.
//!   `ProposalAnswer::{Held, NeedsInput {questions, notes}, Refused {code, message, details}}`: a
//!   refusal crosses the port typed, never as an `Invalid` message.
//! - **Adapter** `crates/adapters-gateway` (`metaforge-adapters-gateway`, ports only): `GatewayClient`
//!   (base URL + `X-API-Key`; 404→NotFound, 409→Conflict keeping the gateway's message, other
//!   4xx→Invalid, 5xx/connection→Unavailable), `RemoteApprovalLedger` (park/get/list/resolve over
//!   `/v1/chat/tool_approvals…`; `decide` refused Invalid, `restore` a no-op, `history` refused) and
//!   `RemoteFlowBindings` (`POST /v1/design-flows/propose` — a 422 is read back as
//!   `ProposalAnswer::Refused` with the gateway's own `{error, message, details}` — and
//!   `GET /v1/design-flows/versions/{id}`).
//! - **Use case** `metaforge_sidecar::host_with_bindings(bindings, HeldWrites)`: flow.list/validate (pure),
//!   the same `FlowPropose`/`FlowVersion` as in process, held writes waiting through
//!   `ApprovalService::waiter(ledger, clock, ids)` (a service with no version store: never decides).
//! - **Selection** in `bins/src/cmd/mcp.rs`: `METAFORGE_GATEWAY_URL` set → remote mode, logged as
//!   `mcp_flow_bindings_remote`; unset → SQLite ledgers under `METAFORGE_HOME`, logged at every start
//!   as WARN `mcp_flow_bindings_in_process`. `METAFORGE_GATEWAY_API_KEY`: the first entry's key.
//! - **Invariants:** one ledger — in remote mode the sidecar writes nothing locally; the gateway
//!   assigns hold ids and deadlines (the returned record is the one polled); closing a hold
//!   (timed_out/canceled) is best-effort: a failure is logged (`tool_approval_resolution_failed`)
//!   and counted (`metaforge_tool_approval_resolution_total{result="failed"}`), never raised into the
//!   tool call.

mod chat;
mod client;
mod flows;
mod ledger;
mod runs;

pub use chat::{ChatClient, ChatEvent};
pub use client::{GatewayClient, GatewayClientError};
pub use flows::RemoteFlowBindings;
pub use ledger::RemoteApprovalLedger;
pub use runs::RemoteRunBindings;
