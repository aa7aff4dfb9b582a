//! The LLM adapters' integration tests, one binary (each former `tests/*.rs` is a module here):
//! request bodies and recorded wire streams (snapshots), cache-usage fixtures, credentials, the
//! OpenAI/Bedrock contracts, every family against aimock, the opt-in real model, and each
//! family's request pinned to a JSON fixture and its answers read at the edges.

mod aimock_families;
mod cache_usage_fixtures;
mod contracts;
mod credentials_file;
mod real_model;
mod request_bodies;
mod wire_answers;
mod wire_fixtures;
mod wire_recorded;
