//! Durable stores for MetaForge.
//!
//! What lands here (issue 5): SQLite ledgers via sqlx (approvals, flow versions, runs, client
//! tasks, usage, sessions), the embedded twin graph, and — behind the `falkordb` and `kafka`
//! features — the FalkorDB twin and the Kafka event bus. Adapters depend on `metaforge-ports` only.
