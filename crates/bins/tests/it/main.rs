//! The binary's process tests: one test binary, one module per behaviour a user reaches through
//! the `metaforge` process (the feature-gated Kafka and Temporal tests are binaries of their own,
//! `tests/run_events_kafka.rs` and `tests/runs_temporal.rs`, so the default build links neither
//! rdkafka nor the Temporal SDK).

mod chat_process;
mod check_cli;
#[path = "../common/mod.rs"]
mod common;
mod config_cli;
mod console_browser;
mod engineering_tool_servers;
mod evidence_runs;
#[cfg(feature = "falkordb")]
mod falkordb_twin;
mod flow_cli;
mod gateway_process;
mod hardening;
mod llm_cli;
mod logs_process;
mod mcp_conformance;
mod mcp_held_writes;
mod mcp_peers;
#[cfg(feature = "postgres")]
mod postgres_gateways;
mod run_crash_loop;
#[path = "../run_support/mod.rs"]
#[expect(dead_code, reason = "the stall hook is used only by the Temporal binary")]
mod run_support;
mod runs_mcp_client;
mod runs_process;
mod sidecar_json_responses;
mod sidecar_remote;
mod skills_cli;
mod slow_clients;
mod tool_servers_process;
mod traces_process;
mod usage_durability;
mod validation_load;
