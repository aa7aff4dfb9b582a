//! LLM provider adapters for MetaForge.
//!
//! One adapter per API family — OpenAI-compatible chat completions, Anthropic Messages, Gemini
//! generateContent, Bedrock Converse and the openai-codex Responses API — each implementing
//! `metaforge_ports::LlmProvider` over reqwest (rustls) and SSE / AWS event-stream framing, plus
//! the file-backed credential store. Adapters depend on `metaforge-ports` only: usage leaves them
//! raw, and every routing or accounting rule lives in the domain.

// Every variant of our own enums is named: a new `LlmRole`, `ToolChoice` or `ContentPart` must not
// compile into a silent default (issue 11, W4).
#![deny(clippy::wildcard_enum_match_arm)]

pub mod anthropic;
pub mod bedrock;
pub mod codex;
pub mod credentials_file;
pub mod frames;
pub mod gemini;
pub mod http;
pub mod openai;
mod wire;

pub use anthropic::AnthropicProvider;
pub use bedrock::BedrockProvider;
pub use codex::{CodexProvider, read_codex_auth_file};
pub use credentials_file::FileCredentialStore;
pub use gemini::GeminiProvider;
pub use http::HttpSettings;
pub use openai::OpenAiCompatibleProvider;
