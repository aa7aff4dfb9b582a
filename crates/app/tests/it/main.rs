//! The integration tests of `metaforge-app`: one test binary, one module per behaviour (`cargo nextest run -p metaforge-app`).

mod agent_turns;
mod fault_injection;
mod process_presence;
mod runs_brains;
mod runs_engine;
mod tool_registry;
mod twin_runs;
mod twin_service;
mod usage_accounting;
