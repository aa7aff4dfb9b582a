//! The integration tests of `metaforge-sidecar`: one test binary, one module per behaviour (`cargo nextest run -p metaforge-sidecar`).

mod sidecar_flows;
mod sidecar_runs;
mod sidecar_twin;
