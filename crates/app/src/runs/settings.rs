//! The deployment's run settings, parsed strictly: `METAFORGE_FLOW_ENGINE` (which engine runs
//! design flows), `METAFORGE_INTELLIGENCE` (who does phase work when a run request does not
//! say) and `METAFORGE_GATE_TIMEOUT_SECONDS` (how long a human gate stays open). Only the binary reads the environment; it hands the raw values here. A value that is
//! not one of the accepted ones is an error naming the variable and every accepted value — never a
//! quiet fall-through to the default (FORGE-401/581).

use metaforge_ports::{FlowEngineKind, IntelligenceMode};

/// The variable selecting the flow engine (`embedded`, the default, or `temporal`).
pub const FLOW_ENGINE_ENV: &str = "METAFORGE_FLOW_ENGINE";
/// The variable giving the deployment's default intelligence mode (`server`, the default, or
/// `client`).
pub const INTELLIGENCE_ENV: &str = "METAFORGE_INTELLIGENCE";
/// The variable giving how long a human gate of a new run stays open before it expires as a
/// rejection (FORGE-401: "a gate that expires is a rejection"); unset: gates wait for a person.
pub const GATE_TIMEOUT_ENV: &str = "METAFORGE_GATE_TIMEOUT_SECONDS";
/// The run request's field choosing the intelligence mode of one run.
pub const INTELLIGENCE_FIELD: &str = "intelligence";

/// A setting or request field whose value is not one it accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?} is not accepted: use one of {accepted}")]
pub struct RunSettingError {
    /// The variable or request field.
    pub name: &'static str,
    /// The value given.
    pub value: String,
    /// The accepted values, comma separated.
    pub accepted: &'static str,
}

/// Parses `METAFORGE_FLOW_ENGINE`: unset or empty → `embedded`; `embedded` or `temporal`
/// (surrounding whitespace ignored, case-sensitive) → that engine; anything else is an error.
/// Selecting `temporal` is accepted here; the Temporal engine is not built yet (issue 17), so the
/// binary composes [`super::UnavailableEngine::temporal_not_built`] for it: every run start is then
/// a 503 naming the variable, never a silent fall-through to the embedded engine.
pub fn parse_flow_engine(value: Option<&str>) -> Result<FlowEngineKind, RunSettingError> {
    match value.map(str::trim) {
        None | Some("") => Ok(FlowEngineKind::Embedded),
        Some("embedded") => Ok(FlowEngineKind::Embedded),
        Some("temporal") => Ok(FlowEngineKind::Temporal),
        Some(other) => Err(RunSettingError {
            name: FLOW_ENGINE_ENV,
            value: other.to_owned(),
            accepted: "embedded, temporal",
        }),
    }
}

/// Parses `METAFORGE_INTELLIGENCE`: unset or empty → `server`; `server` or `client` → that mode;
/// anything else is an error (the binary refuses to start).
pub fn parse_intelligence(value: Option<&str>) -> Result<IntelligenceMode, RunSettingError> {
    parse_mode(INTELLIGENCE_ENV, value, IntelligenceMode::Server)
}

/// Parses `METAFORGE_GATE_TIMEOUT_SECONDS`: unset or empty → `None` (no deadline); a whole
/// number of seconds, 1 or more → that; anything else (0, a unit, a fraction) is an error — a
/// gate that expires at once, or never while the operator thinks it does, is not a default.
pub fn parse_gate_timeout(value: Option<&str>) -> Result<Option<u64>, RunSettingError> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some(text) => match text.parse::<u64>() {
            Ok(seconds) if seconds > 0 => Ok(Some(seconds)),
            Ok(_) | Err(_) => Err(RunSettingError {
                name: GATE_TIMEOUT_ENV,
                value: text.to_owned(),
                accepted: "a whole number of seconds, 1 or more (unset: gates wait for a person)",
            }),
        },
    }
}

/// The intelligence mode of one run: the request's `intelligence` when it names one, else the
/// deployment default (FORGE-581). A value that is not a mode is an error naming the field (the
/// door answers 422), never a quiet fall back to the default.
pub fn resolve_intelligence(
    requested: Option<&str>,
    deployment_default: IntelligenceMode,
) -> Result<IntelligenceMode, RunSettingError> {
    // Unlike the variable (blank is unset there), a field sent empty or blank names no mode.
    match requested {
        None => Ok(deployment_default),
        Some(text) => IntelligenceMode::parse(text.trim()).ok_or_else(|| RunSettingError {
            name: INTELLIGENCE_FIELD,
            value: text.to_owned(),
            accepted: "server, client",
        }),
    }
}

fn parse_mode(
    name: &'static str,
    value: Option<&str>,
    default: IntelligenceMode,
) -> Result<IntelligenceMode, RunSettingError> {
    match value.map(str::trim) {
        None | Some("") => Ok(default),
        Some(text) => IntelligenceMode::parse(text).ok_or_else(|| RunSettingError {
            name,
            value: text.to_owned(),
            accepted: "server, client",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flow_engine_defaults_to_embedded_and_refuses_anything_else_naming_the_variable() {
        assert_eq!(parse_flow_engine(None), Ok(FlowEngineKind::Embedded));
        assert_eq!(parse_flow_engine(Some(" ")), Ok(FlowEngineKind::Embedded));
        assert_eq!(parse_flow_engine(Some("embedded")), Ok(FlowEngineKind::Embedded));
        assert_eq!(
            parse_flow_engine(Some(" temporal\n")),
            Ok(FlowEngineKind::Temporal)
        );
        for bad in ["in_process", "Temporal", "embeded"] {
            let err = parse_flow_engine(Some(bad)).err();
            let text = err.as_ref().map(ToString::to_string).unwrap_or_default();
            assert!(
                text.contains(FLOW_ENGINE_ENV) && text.contains("embedded, temporal") && text.contains(bad),
                "{bad}: {text}"
            );
        }
    }

    #[test]
    fn a_gate_timeout_is_whole_seconds_or_unset_and_anything_else_names_the_variable() {
        assert_eq!(parse_gate_timeout(None), Ok(None));
        assert_eq!(parse_gate_timeout(Some(" ")), Ok(None));
        assert_eq!(parse_gate_timeout(Some(" 90\n")), Ok(Some(90)));
        for bad in ["0", "-1", "1.5", "90s", "soon"] {
            let err = parse_gate_timeout(Some(bad)).err();
            let text = err.as_ref().map(ToString::to_string).unwrap_or_default();
            assert!(
                text.contains(GATE_TIMEOUT_ENV) && text.contains(bad),
                "{bad}: {text}"
            );
        }
    }

    #[test]
    fn the_intelligence_mode_comes_from_the_request_then_the_deployment_then_server() {
        assert_eq!(parse_intelligence(None), Ok(IntelligenceMode::Server));
        assert_eq!(parse_intelligence(Some("client")), Ok(IntelligenceMode::Client));
        assert_eq!(
            resolve_intelligence(None, IntelligenceMode::Client),
            Ok(IntelligenceMode::Client)
        );
        assert_eq!(
            resolve_intelligence(Some("server"), IntelligenceMode::Client),
            Ok(IntelligenceMode::Server)
        );
        let env = parse_intelligence(Some("model")).err().map(|e| e.to_string());
        assert!(env.is_some_and(|t| t.contains(INTELLIGENCE_ENV) && t.contains("server, client")));
        let field = resolve_intelligence(Some("llm"), IntelligenceMode::Server).err();
        assert_eq!(field.as_ref().map(|e| e.name), Some(INTELLIGENCE_FIELD));
        // Blank is unset for the variable, but a field sent blank names no mode.
        assert_eq!(parse_intelligence(Some(" ")), Ok(IntelligenceMode::Server));
        for blank in ["", "  "] {
            let field = resolve_intelligence(Some(blank), IntelligenceMode::Client).err();
            assert_eq!(
                field.as_ref().map(|e| e.name),
                Some(INTELLIGENCE_FIELD),
                "{blank:?}"
            );
        }
    }
}
