//! The integration tests of `metaforge-adapters-store`: one test binary, one module per behaviour (`cargo nextest run -p metaforge-adapters-store`).

mod approval_model;
#[cfg(feature = "falkordb")]
mod falkordb_contract;
#[cfg(feature = "kafka")]
mod kafka_contract;
#[cfg(feature = "postgres")]
mod postgres_contracts;
#[cfg(feature = "postgres")]
mod postgres_ledgers;
#[cfg(feature = "postgres")]
mod postgres_runs;
mod reopen_durability;
mod sqlite_contracts;
#[cfg(any(feature = "falkordb", feature = "kafka"))]
mod support;
mod traces;
