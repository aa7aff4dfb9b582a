//! The integration tests of `metaforge-test-support`: one test binary, one module per behaviour (`cargo nextest run -p metaforge-test-support`).

mod canonical_hash_properties;
mod doubles_honour_contracts;
