//! First-party engineering tool servers over the [`metaforge_ports::ToolHost`] port, served by
//! `metaforge tool-server <name>` over MCP stdio: [`spice::SpiceHost`] (ngspice, batch mode) and
//! [`fea::FeaHost`] (gmsh and CalculiX).
//!
//! Each analysis is a fresh program run in its own sandbox and scratch directory
//! ([`runner::Runner`]: no network, a read-only filesystem with secrets hidden, CPU, memory,
//! file-size and wall-time limits), removed when the call ends; what the caller sends is checked
//! before the program sees it, and every refusal names what to fix. Results are typed JSON with
//! units, checked against textbook answers by the tests (`tests/it/spice_physics.rs`).

mod answer;
pub mod cad;
pub mod fea;
pub mod kicad;
pub mod live;
pub mod runner;
pub mod spice;
pub mod workspace;
