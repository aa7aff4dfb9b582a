//! The integration tests of `metaforge-ports`: one test binary, one module per behaviour (`cargo nextest run -p metaforge-ports`).

mod approval_rules;
mod run_state;
