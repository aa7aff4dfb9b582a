//! The credential port: several credentials per provider, with dead-token blacklisting.
//!
//! The pipeline pins one credential per session (cache warmth) and rotates on 401/403/429; a
//! terminal 401/403 is written back as dead so no later session picks it again.

use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::PortError;

/// The secret material of one credential. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CredentialSecret {
    /// A bearer/API key (OpenAI-compatible, Anthropic `x-api-key`, Gemini `x-goog-api-key`).
    ApiKey {
        /// The key.
        api_key: String,
    },
    /// AWS keys for SigV4 (Bedrock).
    Aws {
        /// Access key id.
        access_key_id: String,
        /// Secret access key.
        secret_access_key: String,
        /// Session token for temporary credentials.
        #[serde(default)]
        session_token: Option<String>,
        /// Signing region (e.g. us-east-1).
        region: String,
    },
    /// A ChatGPT subscription token from a Codex-CLI auth file.
    ChatGpt {
        /// OAuth access token.
        access_token: String,
        /// ChatGPT account id, sent as `chatgpt-account-id`.
        #[serde(default)]
        account_id: Option<String>,
    },
}

impl fmt::Debug for CredentialSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Self::ApiKey { .. } => "ApiKey",
            Self::Aws { .. } => "Aws",
            Self::ChatGpt { .. } => "ChatGpt",
        };
        write!(f, "{kind}(<redacted>)")
    }
}

/// One credential for one provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    /// Id unique within its provider (a label such as `work` or `key-2`).
    pub id: String,
    /// The secret.
    pub secret: CredentialSecret,
}

/// A stored credential with its health, as the providers view lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCredential {
    /// The credential.
    #[serde(flatten)]
    pub credential: Credential,
    /// True once a terminal 401/403 blacklisted it.
    #[serde(default)]
    pub dead: bool,
    /// Why it was marked dead.
    #[serde(default)]
    pub dead_reason: Option<String>,
}

/// Where credentials live. Implementations must fail closed: a write that cannot be made
/// durable returns an error and changes nothing.
#[async_trait]
pub trait CredentialStore: Send + Sync {
    /// Every credential of `provider`, dead ones included, in stored order.
    async fn list(&self, provider: &str) -> Result<Vec<StoredCredential>, PortError>;

    /// Only the healthy credentials of `provider`, in stored order (rotation order).
    async fn healthy(&self, provider: &str) -> Result<Vec<Credential>, PortError> {
        Ok(self
            .list(provider)
            .await?
            .into_iter()
            .filter(|c| !c.dead)
            .map(|c| c.credential)
            .collect())
    }

    /// Adds a credential; an existing id for the same provider is a conflict.
    async fn add(&self, provider: &str, credential: Credential) -> Result<(), PortError>;

    /// Blacklists a credential after a terminal auth failure.
    async fn mark_dead(&self, provider: &str, id: &str, reason: &str) -> Result<(), PortError>;

    /// Puts a credential back into rotation.
    async fn mark_healthy(&self, provider: &str, id: &str) -> Result<(), PortError>;
}
