//! Provider vocabulary shared by the routing rules and the LLM adapters.

use serde::{Deserialize, Serialize};

/// The wire API family a provider speaks; adapters are chosen by family, not by provider id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ApiFamily {
    /// OpenAI chat completions and every server that imitates it (OpenRouter, vLLM, Ollama, …).
    OpenaiCompatible,
    /// Anthropic Messages API.
    Anthropic,
    /// Google Gemini generateContent API.
    Gemini,
    /// AWS Bedrock Converse API.
    Bedrock,
    /// OpenAI Responses API driven by a ChatGPT subscription (Codex auth file).
    OpenaiCodex,
}

impl ApiFamily {
    /// The family's stable snake_case name, as it appears in JSON and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenaiCompatible => "openai_compatible",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Bedrock => "bedrock",
            Self::OpenaiCodex => "openai_codex",
        }
    }
}
