//! Temporal engine for durable design-flow runs.
//!
//! What lands here (a later issue): the temporalio-sdk worker and client that run design flows
//! durably when `METAFORGE_FLOW_ENGINE=temporal`. Kept in its own crate and behind a feature so the
//! everyday build does not pay for it. Adapters depend on `metaforge-ports` only.
