//! Role slots: each role's ordered candidates (primary first, then fallbacks), checked against
//! the provider registry at configuration time so an impossible pair never reaches the wire.

use std::collections::BTreeMap;

use metaforge_domain::providers::{model_family_mismatch, resolve_provider};

/// One provider+model target.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Candidate {
    /// Canonical provider id.
    pub provider: String,
    /// Model name.
    pub model: String,
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}

/// A candidate removed at configuration time, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedCandidate {
    /// The candidate as configured.
    pub candidate: Candidate,
    /// Why it can never work (names the model).
    pub reason: String,
}

/// A role's chain after the configuration check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedChain {
    /// The configured primary (even when dropped: fallbacks are judged against it).
    pub configured_primary: Candidate,
    /// Candidates that survived, in order.
    pub candidates: Vec<Candidate>,
    /// Candidates dropped at configuration time.
    pub dropped: Vec<DroppedCandidate>,
}

/// Configuration errors of the role slots.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// The role has no candidates at all.
    #[error("role '{0}' has no configured provider")]
    EmptyRole(String),
    /// Every candidate failed the family check; each is named with its reason.
    #[error("no usable candidate for role '{role}': {}", .dropped.iter().map(|d| format!("{} ({})", d.candidate, d.reason)).collect::<Vec<_>>().join("; "))]
    NoUsableCandidate {
        /// The role.
        role: String,
        /// Every dropped candidate.
        dropped: Vec<DroppedCandidate>,
    },
}

/// Checks a chain: unknown providers and family mismatches are dropped (reason model_mismatch).
pub fn resolve_chain(role: &str, configured: &[Candidate]) -> Result<ResolvedChain, SlotError> {
    let Some(primary) = configured.first() else {
        return Err(SlotError::EmptyRole(role.to_owned()));
    };
    let mut candidates = Vec::new();
    let mut dropped = Vec::new();
    for candidate in configured {
        match resolve_provider(&candidate.provider) {
            Err(err) => dropped.push(DroppedCandidate {
                candidate: candidate.clone(),
                reason: err.to_string(),
            }),
            Ok(info) => {
                let canonical = Candidate {
                    provider: info.id.to_owned(),
                    model: candidate.model.clone(),
                };
                match model_family_mismatch(info, &candidate.model) {
                    Some(reason) => {
                        tracing::warn!(
                            role,
                            provider = info.id,
                            model = candidate.model.as_str(),
                            reason = reason.as_str(),
                            "harness_provider_model_mismatch"
                        );
                        dropped.push(DroppedCandidate {
                            candidate: canonical,
                            reason,
                        });
                    }
                    None if !candidates.contains(&canonical) => candidates.push(canonical),
                    None => {}
                }
            }
        }
    }
    if candidates.is_empty() {
        return Err(SlotError::NoUsableCandidate {
            role: role.to_owned(),
            dropped,
        });
    }
    let configured_primary = match resolve_provider(&primary.provider) {
        Ok(info) => Candidate {
            provider: info.id.to_owned(),
            model: primary.model.clone(),
        },
        Err(_) => primary.clone(),
    };
    Ok(ResolvedChain {
        configured_primary,
        candidates,
        dropped,
    })
}

/// Every role's configured chain, resolved once at configuration time.
#[derive(Debug, Clone, Default)]
pub struct RoleModelSlots {
    roles: BTreeMap<String, ResolvedChain>,
}

impl RoleModelSlots {
    /// Resolves every role; the first role whose chain cannot work fails the whole config.
    pub fn new(config: BTreeMap<String, Vec<Candidate>>) -> Result<Self, SlotError> {
        let mut roles = BTreeMap::new();
        for (role, chain) in config {
            let resolved = resolve_chain(&role, &chain)?;
            roles.insert(role, resolved);
        }
        Ok(Self { roles })
    }

    /// Every role and its resolved chain.
    pub fn roles(&self) -> impl Iterator<Item = (&String, &ResolvedChain)> {
        self.roles.iter()
    }

    /// The resolved chain of `role`.
    pub fn chain(&self, role: &str) -> Option<&ResolvedChain> {
        self.roles.get(role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(p: &str, m: &str) -> Candidate {
        Candidate {
            provider: p.into(),
            model: m.into(),
        }
    }

    #[test]
    fn mismatched_candidates_are_dropped_and_survivors_keep_their_order() {
        let chain = resolve_chain(
            "chat",
            &[
                c("anthropic", "gpt-4o"),
                c("openai", "gpt-4o"),
                c("claude", "claude-haiku-4-5"),
            ],
        )
        .unwrap();
        assert_eq!(chain.configured_primary, c("anthropic", "gpt-4o"));
        assert_eq!(
            chain.candidates,
            vec![c("openai", "gpt-4o"), c("anthropic", "claude-haiku-4-5")]
        );
        assert_eq!(chain.dropped.len(), 1);
        assert!(chain.dropped[0].reason.contains("gpt-4o"));
    }

    #[test]
    fn a_chain_with_no_survivor_names_each_candidate() {
        let err = resolve_chain("chat", &[c("anthropic", "gpt-4o"), c("gemini", "claude-3")]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("anthropic:gpt-4o"), "{text}");
        assert!(text.contains("gemini:claude-3"), "{text}");
    }
}
