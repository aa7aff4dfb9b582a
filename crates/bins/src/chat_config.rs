//! The chat runtime's configuration, read once at start: each variable parsed strictly and named
//! in its error, so a typo refuses start instead of running with a default nobody chose.

use std::time::Duration;

use metaforge_agent::LoopMode;
use metaforge_app::chat::{ChatSettings, DEFAULT_CHAT_SYSTEM_PROMPT};
use metaforge_domain::grounding::{GATE_PROJECT_WRITE, GATE_TWIN_WRITE};

/// `0` makes chat unable to write the twin (the `twin_write` gate is off); default on.
pub(crate) const CHAT_TWIN_WRITES_ENV: &str = "METAFORGE_CHAT_TWIN_WRITES";
/// `0` makes chat unable to create, change or delete projects (`project_write`); default on.
pub(crate) const CHAT_PROJECT_WRITES_ENV: &str = "METAFORGE_CHAT_PROJECT_WRITES";
/// The history budget of a chat turn in tokens (default 12 000).
pub(crate) const HISTORY_TOKENS_ENV: &str = "METAFORGE_HISTORY_TOKENS";
/// Most model calls in one chat turn (default 12).
pub(crate) const CHAT_MAX_ITERATIONS_ENV: &str = "METAFORGE_CHAT_MAX_ITERATIONS";
/// Most prompt + completion tokens one chat turn may use (default: no budget).
pub(crate) const CHAT_TOKEN_BUDGET_ENV: &str = "METAFORGE_CHAT_TOKEN_BUDGET";
/// How long a held chat call waits for a person, in seconds (default 1800).
pub(crate) const CHAT_APPROVAL_TIMEOUT_ENV: &str = "METAFORGE_CHAT_APPROVAL_TIMEOUT_SECONDS";
/// A file holding the chat system prompt (default: MetaForge's own).
pub(crate) const CHAT_SYSTEM_PROMPT_PATH_ENV: &str = "METAFORGE_CHAT_SYSTEM_PROMPT_PATH";

/// The chat settings from `lookup` (the process environment in the binary).
pub(crate) fn chat_settings(lookup: &dyn Fn(&str) -> Option<String>) -> Result<ChatSettings, String> {
    let defaults = ChatSettings::default();
    let mut disabled_gates = Vec::new();
    if !switch(lookup, CHAT_TWIN_WRITES_ENV)? {
        disabled_gates.push(GATE_TWIN_WRITE.to_owned());
    }
    if !switch(lookup, CHAT_PROJECT_WRITES_ENV)? {
        disabled_gates.push(GATE_PROJECT_WRITE.to_owned());
    }
    let loop_mode = LoopMode::parse_setting(lookup(metaforge_agent::AGENT_LOOP_ENV).as_deref())
        .map_err(|e| e.to_string())?;
    let system_prompt = match lookup(CHAT_SYSTEM_PROMPT_PATH_ENV) {
        Some(path) => std::fs::read_to_string(&path)
            .map_err(|e| format!("{CHAT_SYSTEM_PROMPT_PATH_ENV}={path}: {e}"))?,
        None => DEFAULT_CHAT_SYSTEM_PROMPT.to_owned(),
    };
    Ok(ChatSettings {
        system_prompt,
        max_iterations: positive(lookup, CHAT_MAX_ITERATIONS_ENV)?.unwrap_or(defaults.max_iterations as u64)
            as usize,
        token_budget: positive(lookup, CHAT_TOKEN_BUDGET_ENV)?,
        history_tokens: positive(lookup, HISTORY_TOKENS_ENV)?.map_or(defaults.history_tokens, |n| n as usize),
        approval_timeout: positive(lookup, CHAT_APPROVAL_TIMEOUT_ENV)?
            .map_or(defaults.approval_timeout, Duration::from_secs),
        loop_mode,
        disabled_gates,
    })
}

/// An on/off switch that defaults to on: `1|on|true` or `0|off|false`.
fn switch(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<bool, String> {
    match lookup(name).as_deref().map(str::trim) {
        None | Some("") => Ok(true),
        Some(v) if ["1", "on", "true"].contains(&v.to_ascii_lowercase().as_str()) => Ok(true),
        Some(v) if ["0", "off", "false"].contains(&v.to_ascii_lowercase().as_str()) => Ok(false),
        Some(v) => Err(format!("{name}={v}: expected 1, 0, on, off, true or false")),
    }
}

/// A positive whole number, when set.
fn positive(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<u64>, String> {
    match lookup(name).as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(format!("{name}={v}: expected a positive whole number")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<ChatSettings, String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        chat_settings(&move |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn unset_variables_give_the_defaults_with_every_gate_on() {
        let settings = from(&[]).unwrap();
        assert_eq!(settings.max_iterations, 12);
        assert_eq!(settings.history_tokens, 12_000);
        assert!(settings.token_budget.is_none());
        assert!(settings.disabled_gates.is_empty());
        assert_eq!(settings.loop_mode, LoopMode::Auto);
    }

    #[test]
    fn zero_switches_make_chat_read_only_for_that_gate() {
        let settings = from(&[(CHAT_TWIN_WRITES_ENV, "0"), (CHAT_PROJECT_WRITES_ENV, "off")]).unwrap();
        assert_eq!(settings.disabled_gates, ["twin_write", "project_write"]);
    }

    #[test]
    fn a_bad_value_is_refused_naming_the_variable() {
        let err = from(&[(CHAT_MAX_ITERATIONS_ENV, "0")]).unwrap_err();
        assert!(err.contains("METAFORGE_CHAT_MAX_ITERATIONS=0"), "{err}");
        let err = from(&[(CHAT_TWIN_WRITES_ENV, "nope")]).unwrap_err();
        assert!(err.contains("METAFORGE_CHAT_TWIN_WRITES=nope"), "{err}");
        let err = from(&[("METAFORGE_AGENT_LOOP", "fast")]).unwrap_err();
        assert!(err.contains("METAFORGE_AGENT_LOOP"), "{err}");
    }
}
