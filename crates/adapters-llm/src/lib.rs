//! LLM provider adapters for MetaForge.
//!
//! What lands here (issue 4): one adapter per API family — OpenAI-compatible chat completions,
//! Anthropic Messages, Gemini generateContent, Bedrock Converse and the openai-codex Responses API —
//! each implementing `metaforge_ports::LlmProvider` over reqwest (rustls) and SSE, plus the
//! file-backed credential store. Adapters depend on `metaforge-ports` only.
