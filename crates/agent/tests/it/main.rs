//! The agent loop's integration tests: scripted multi-turn tool conversations over the
//! test-support doubles (scripted model, fake MCP server, in-memory approval ledger).
#![expect(clippy::expect_used, reason = "tests: a failed expectation is a failed test")]

mod common;
mod grounding;
mod holds;
mod loop_setting;
mod native;
mod pge;
mod policy;
mod props;
mod react;
