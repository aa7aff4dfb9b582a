//! An HTTP client of the gateway's own REST API (FORGE-406/462; issue 16 item 7).
//!
//! A sidecar started with `METAFORGE_GATEWAY_URL` must not keep a queue of its own: two queues
//! means a reviewer clearing one while the other fills. This crate implements the ports the
//! sidecar needs over the gateway's routes, so a held call parks in the gateway's ledger, a
//! plugin's proposal is the version the dashboard shows, and a run a plugin starts or a gate it
//! relays is the run `/v1/runs` lists ([`RemoteRunBindings`]). `metaforge chat` talks to a gateway's
//! chat threads through [`ChatClient`].

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
