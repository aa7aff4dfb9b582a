//! Per-role model routing (FORGE-477): which provider and model serve a role.
//!
//! Precedence, highest first: an explicit per-call `provider:model`, the running phase's own model
//! (for `phase_brain` roles only: a gate check or classification inside a phase goes through the
//! table), the project's routes, the table (the file, with `METAFORGE_ROUTE_<ROLE>` overriding one role),
//! the durable selection, then the deployment default. For `phase_brain` the phase's disciplines
//! are tried first (`phase_brain:mechanical`), then `phase_brain`. Every route is validated (role,
//! provider, family mismatch) and a route to a provider without credentials is refused, never
//! skipped: a bad route is a configuration error, not a quiet fall-through to another model. Every
//! error names where the route came from (the env variable or the table entry), and an env
//! override naming no role is an error too.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::providers::{model_family_mismatch, parse_route, resolve_provider};

/// The roles a route may name (plus `phase_brain:<discipline>`).
pub const ROLES: &[&str] = &[
    "flow_generator",
    "phase_brain",
    "gate_check",
    "classification",
    "summarisation",
    "chat",
    "planner",
    "generator",
    "evaluator",
];

/// The prefix of a per-role env override.
pub const ROUTE_ENV_PREFIX: &str = "METAFORGE_ROUTE_";

/// The env variable pointing at a replacement routing file (read by the binary, not here).
pub const MODEL_ROUTES_PATH_ENV: &str = "METAFORGE_MODEL_ROUTES_PATH";

/// Whether `role` is a routable role: one of [`ROLES`] or `phase_brain:<discipline>` with a
/// lower-case discipline of letters, digits, `_` or `-`.
pub fn is_valid_role(role: &str) -> bool {
    if ROLES.contains(&role) {
        return true;
    }
    role.strip_prefix("phase_brain:").is_some_and(|d| {
        !d.is_empty()
            && d.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
    })
}

/// The env override for a role: upper-cased, `:` and `-` as `_`
/// (`phase_brain:mechanical` → `METAFORGE_ROUTE_PHASE_BRAIN_MECHANICAL`).
pub fn env_var_for_role(role: &str) -> String {
    let upper: String = role
        .chars()
        .map(|c| match c {
            ':' | '-' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    format!("{ROUTE_ENV_PREFIX}{upper}")
}

/// The routes of one project.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProjectRoutes {
    /// role → `provider:model`.
    #[serde(default)]
    pub roles: BTreeMap<String, String>,
}

/// The routing table: `{roles: {role: "provider:model"}, projects: {id: {roles: {…}}}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RoutingTable {
    /// Deployment-wide routes.
    #[serde(default)]
    pub roles: BTreeMap<String, String>,
    /// Per-project routes, which win over the deployment-wide ones.
    #[serde(default)]
    pub projects: BTreeMap<String, ProjectRoutes>,
}

impl RoutingTable {
    /// Parses a table from JSON text; a syntax or shape error names line and column.
    pub fn from_json(text: &str) -> Result<Self, RoutingConfigError> {
        serde_json::from_str(text).map_err(|e| RoutingConfigError::InvalidTable {
            message: format!("line {}, column {}: {e}", e.line(), e.column()),
        })
    }
}

/// Where a resolved route came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RouteSource {
    /// The call named its own provider and model.
    Explicit,
    /// The running flow phase's model.
    Phase,
    /// The project's routes.
    Project,
    /// The routing table (file or `METAFORGE_ROUTE_<ROLE>`).
    Table,
    /// The durable harness selection.
    Selection,
    /// The deployment default.
    Default,
}

/// Where a route came from, so an error can point at the line to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteLocation {
    /// The call's own explicit `provider:model`.
    Explicit,
    /// The running phase's `model`.
    Phase,
    /// The table entry `projects['<id>'].roles['<role>']`.
    Project {
        /// Project id.
        project: String,
        /// Role key.
        role: String,
    },
    /// The table entry `roles['<role>']`.
    Table {
        /// Role key.
        role: String,
    },
    /// A `METAFORGE_ROUTE_<ROLE>` variable.
    Env {
        /// The variable's name.
        var: String,
    },
    /// The durable harness selection.
    Selection,
    /// The deployment default.
    Default,
}

impl std::fmt::Display for RouteLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Explicit => f.write_str("the call's explicit route"),
            Self::Phase => f.write_str("the phase's model"),
            Self::Project { project, role } => {
                write!(f, "table entry projects['{project}'].roles['{role}']")
            }
            Self::Table { role } => write!(f, "table entry roles['{role}']"),
            Self::Env { var } => write!(f, "env {var}"),
            Self::Selection => f.write_str("the stored harness selection"),
            Self::Default => {
                f.write_str("the deployment default (METAFORGE_LLM_PROVIDER/METAFORGE_LLM_MODEL)")
            }
        }
    }
}

/// A bad route, always naming the role, the route, where it came from and (when known) the
/// provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingConfigError {
    /// The routing file is not valid JSON of the table's shape.
    #[error("routing table is invalid: {message}")]
    InvalidTable {
        /// What was wrong, with line and column.
        message: String,
    },
    /// A role name that is not routable (in the table, a project, an env override or a call).
    #[error("unknown role '{role}' in {location} (routable roles: {}, phase_brain:<discipline>)", ROLES.join(", "))]
    UnknownRole {
        /// The role as written.
        role: String,
        /// Where it was found (table, project <id>, env <VAR>).
        location: String,
    },
    /// A route not of the form `provider:model`.
    #[error("route '{route}' for role '{role}' (from {location}) is not of the form provider:model")]
    MalformedRoute {
        /// The role.
        role: String,
        /// The route.
        route: String,
        /// Where the route came from ([`RouteLocation`]'s text).
        location: String,
    },
    /// A route naming a provider the registry does not know.
    #[error("route '{route}' for role '{role}' (from {location}) names unknown provider '{provider}'")]
    UnknownProvider {
        /// The role.
        role: String,
        /// The route.
        route: String,
        /// The provider as written.
        provider: String,
        /// Where the route came from.
        location: String,
    },
    /// A route whose provider's API family cannot serve its model (FORGE-468).
    #[error("route '{route}' for role '{role}' (provider '{provider}', from {location}): {reason}")]
    ModelMismatch {
        /// The role.
        role: String,
        /// The route.
        route: String,
        /// Canonical provider id.
        provider: String,
        /// Why, naming the model and its vendor.
        reason: String,
        /// Where the route came from.
        location: String,
    },
    /// A route to a provider with no credentials on this deployment.
    #[error(
        "route '{route}' for role '{role}' (from {location}) uses provider '{provider}', which has no credentials configured"
    )]
    ProviderUnconfigured {
        /// The role.
        role: String,
        /// The route.
        route: String,
        /// Canonical provider id.
        provider: String,
        /// Where the route came from.
        location: String,
    },
    /// Nothing routes the role: no route, no selection, no default. The message names what a
    /// person sets to route it.
    #[error(
        "no route, selection or default model for role '{role}': set {}=<provider>:<model> (with that provider's key), or METAFORGE_LLM_PROVIDER and METAFORGE_LLM_MODEL for every role",
        env_var_for_role(role)
    )]
    NoRoute {
        /// The role.
        role: String,
    },
}

impl RoutingConfigError {
    /// Whether the gateway refuses to start on this problem. An unconfigured provider does not
    /// block boot (a login can arrive later); it is logged as `model_route_provider_unconfigured`.
    pub fn blocks_start(&self) -> bool {
        !matches!(self, Self::ProviderUnconfigured { .. })
    }

    /// Where the offending route or role came from (`env METAFORGE_ROUTE_CHAT`, `table entry
    /// projects['p'].roles['chat']`, …); `None` for a whole-table or no-route problem.
    pub fn location(&self) -> Option<&str> {
        match self {
            Self::UnknownRole { location, .. }
            | Self::MalformedRoute { location, .. }
            | Self::UnknownProvider { location, .. }
            | Self::ModelMismatch { location, .. }
            | Self::ProviderUnconfigured { location, .. } => Some(location),
            Self::InvalidTable { .. } | Self::NoRoute { .. } => None,
        }
    }

    /// A stable snake_case code for JSON answers.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidTable { .. } => "invalid_table",
            Self::UnknownRole { .. } => "unknown_role",
            Self::MalformedRoute { .. } => "malformed_route",
            Self::UnknownProvider { .. } => "unknown_provider",
            Self::ModelMismatch { .. } => "model_mismatch",
            Self::ProviderUnconfigured { .. } => "provider_unconfigured",
            Self::NoRoute { .. } => "no_route",
        }
    }
}

/// Why a role was served by something other than its primary (FORGE-468): the `reason` label
/// of `metaforge_harness_provider_fallback_total` and the `harness_provider_fallback` log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FallbackReason {
    /// The primary was tried and failed.
    CallFailed,
    /// The primary was dropped at configuration time by the family check.
    ModelMismatch,
    /// The primary's family declined by design (e.g. Codex has no event-streaming adapter).
    CapabilityUnsupported,
}

impl FallbackReason {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CallFailed => "call_failed",
            Self::ModelMismatch => "model_mismatch",
            Self::CapabilityUnsupported => "capability_unsupported",
        }
    }

    /// True when the fallback is an alarm: logged at WARNING and counted toward
    /// `HarnessProviderFallbackSustained`. A by-design capability fallback is logged at INFO.
    pub fn is_alarm(self) -> bool {
        !matches!(self, Self::CapabilityUnsupported)
    }
}

/// One model call asking to be routed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RouteCall {
    /// The role (`chat`, `phase_brain`, `phase_brain:mechanical`, …).
    pub role: String,
    /// The running phase's disciplines, tried first for `phase_brain`.
    #[serde(default)]
    pub disciplines: Vec<String>,
    /// The project the call is scoped to.
    #[serde(default)]
    pub project_id: Option<String>,
    /// The running phase's own `provider:model`.
    #[serde(default)]
    pub phase_model: Option<String>,
    /// A per-call `provider:model`.
    #[serde(default)]
    pub explicit: Option<String>,
}

/// The provider and model that will serve a call, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResolvedRoute {
    /// Canonical provider id.
    pub provider: String,
    /// Model name.
    pub model: String,
    /// The role key that matched (for explicit/phase/selection/default, the call's role).
    pub matched_role: String,
    /// Which layer supplied it.
    pub source: RouteSource,
}

/// Everything resolution reads besides the call, passed in so the rule stays pure.
#[derive(Debug, Clone, Copy)]
pub struct RoutingInputs<'a> {
    /// The routing table (the shipped one has no routes).
    pub table: &'a RoutingTable,
    /// The process environment, as a map (only `METAFORGE_ROUTE_*` is read).
    pub env: &'a BTreeMap<String, String>,
    /// Providers with credentials; `None` when the caller cannot tell, which skips the check.
    pub credentialed: Option<&'a BTreeSet<String>>,
    /// The durable harness selection, `provider:model`.
    pub selection: Option<&'a str>,
    /// The deployment default, `provider:model`.
    pub default: Option<&'a str>,
}

/// The role keys tried for a call, most specific first.
pub fn candidate_roles(call: &RouteCall) -> Vec<String> {
    let mut roles = Vec::new();
    if call.role == "phase_brain" || call.role.starts_with("phase_brain:") {
        if call.role != "phase_brain" {
            roles.push(call.role.clone());
        }
        for discipline in &call.disciplines {
            let role = format!("phase_brain:{}", discipline.trim().to_ascii_lowercase());
            if !roles.contains(&role) {
                roles.push(role);
            }
        }
        roles.push("phase_brain".to_owned());
    } else {
        roles.push(call.role.clone());
    }
    roles
}

/// Validates one route for a role and returns it resolved to a canonical provider; an error
/// names `location`, where the route came from.
pub fn check_route(
    role: &str,
    route: &str,
    location: &RouteLocation,
) -> Result<(String, String), RoutingConfigError> {
    let parsed = parse_route(route).map_err(|_| RoutingConfigError::MalformedRoute {
        role: role.to_owned(),
        route: route.to_owned(),
        location: location.to_string(),
    })?;
    let provider = resolve_provider(&parsed.provider).map_err(|_| RoutingConfigError::UnknownProvider {
        role: role.to_owned(),
        route: route.to_owned(),
        provider: parsed.provider.clone(),
        location: location.to_string(),
    })?;
    if let Some(reason) = model_family_mismatch(provider, &parsed.model) {
        return Err(RoutingConfigError::ModelMismatch {
            role: role.to_owned(),
            route: route.to_owned(),
            provider: provider.id.to_owned(),
            reason,
            location: location.to_string(),
        });
    }
    Ok((provider.id.to_owned(), parsed.model))
}

fn finish(
    inputs: &RoutingInputs<'_>,
    role: &str,
    route: &str,
    source: RouteSource,
    location: &RouteLocation,
) -> Result<ResolvedRoute, RoutingConfigError> {
    let (provider, model) = check_route(role, route, location)?;
    if let Some(credentialed) = inputs.credentialed {
        let has = credentialed
            .iter()
            .any(|c| resolve_provider(c).is_ok_and(|p| p.id == provider));
        if !has {
            return Err(RoutingConfigError::ProviderUnconfigured {
                role: role.to_owned(),
                route: route.to_owned(),
                provider,
                location: location.to_string(),
            });
        }
    }
    Ok(ResolvedRoute {
        provider,
        model,
        matched_role: role.to_owned(),
        source,
    })
}

/// True for `phase_brain` and `phase_brain:<discipline>`: the only roles a phase's own model
/// serves. A gate check or a classification run inside a phase resolves through the table.
pub fn is_phase_brain_role(role: &str) -> bool {
    role == "phase_brain" || role.starts_with("phase_brain:")
}

/// Every `METAFORGE_ROUTE_*` variable in `env` must name a routable role: an override for a role
/// that does not exist (`METAFORGE_ROUTE_GATE_CHECK_FAST`) is a typo that would otherwise be
/// silently ignored while the person believes the role is rerouted.
pub fn check_env_overrides(env: &BTreeMap<String, String>) -> Result<(), RoutingConfigError> {
    for var in env.keys().filter(|k| k.starts_with(ROUTE_ENV_PREFIX)) {
        let role = role_for_env_var(var).unwrap_or_else(|| {
            var.strip_prefix(ROUTE_ENV_PREFIX)
                .unwrap_or(var)
                .to_ascii_lowercase()
        });
        if !is_valid_role(&role) {
            return Err(RoutingConfigError::UnknownRole {
                role,
                location: format!("env {var}"),
            });
        }
    }
    Ok(())
}

/// Resolves a call to a provider and model, or the configuration error that prevents it.
pub fn resolve_route(
    inputs: &RoutingInputs<'_>,
    call: &RouteCall,
) -> Result<ResolvedRoute, RoutingConfigError> {
    if !is_valid_role(&call.role) {
        return Err(RoutingConfigError::UnknownRole {
            role: call.role.clone(),
            location: "call".to_owned(),
        });
    }
    let present = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    check_env_overrides(inputs.env)?;
    if let Some(route) = present(&call.explicit) {
        return finish(
            inputs,
            &call.role,
            &route,
            RouteSource::Explicit,
            &RouteLocation::Explicit,
        );
    }
    if is_phase_brain_role(&call.role)
        && let Some(route) = present(&call.phase_model)
    {
        return finish(
            inputs,
            &call.role,
            &route,
            RouteSource::Phase,
            &RouteLocation::Phase,
        );
    }
    let candidates = candidate_roles(call);
    if let Some((project_id, project)) = call
        .project_id
        .as_ref()
        .and_then(|id| inputs.table.projects.get_key_value(id))
    {
        for role in &candidates {
            if let Some(route) = project.roles.get(role) {
                let location = RouteLocation::Project {
                    project: project_id.clone(),
                    role: role.clone(),
                };
                return finish(inputs, role, route, RouteSource::Project, &location);
            }
        }
    }
    for role in &candidates {
        let var = env_var_for_role(role);
        if let Some(route) = inputs.env.get(&var).filter(|v| !v.trim().is_empty()) {
            return finish(
                inputs,
                role,
                route,
                RouteSource::Table,
                &RouteLocation::Env { var },
            );
        }
        if let Some(route) = inputs.table.roles.get(role) {
            let location = RouteLocation::Table { role: role.clone() };
            return finish(inputs, role, route, RouteSource::Table, &location);
        }
    }
    if let Some(route) = inputs.selection.filter(|s| !s.trim().is_empty()) {
        return finish(
            inputs,
            &call.role,
            route,
            RouteSource::Selection,
            &RouteLocation::Selection,
        );
    }
    if let Some(route) = inputs.default.filter(|s| !s.trim().is_empty()) {
        return finish(
            inputs,
            &call.role,
            route,
            RouteSource::Default,
            &RouteLocation::Default,
        );
    }
    Err(RoutingConfigError::NoRoute {
        role: call.role.clone(),
    })
}

/// Maps a `METAFORGE_ROUTE_*` variable back to its role, when it names one.
pub fn role_for_env_var(var: &str) -> Option<String> {
    let rest = var.strip_prefix(ROUTE_ENV_PREFIX)?;
    if let Some(discipline) = rest.strip_prefix("PHASE_BRAIN_") {
        return Some(format!("phase_brain:{}", discipline.to_ascii_lowercase()));
    }
    ROLES
        .iter()
        .find(|r| r.to_ascii_uppercase() == rest)
        .map(|r| (*r).to_owned())
}

/// Every problem in a table and its env overrides: bad role names, malformed routes, unknown
/// providers, family mismatches and (when `credentialed` is given) unconfigured providers. The
/// gateway refuses to start on the first four; the last is reported without blocking boot.
pub fn validate_table(
    table: &RoutingTable,
    env: &BTreeMap<String, String>,
    credentialed: Option<&BTreeSet<String>>,
) -> Vec<RoutingConfigError> {
    let mut problems = Vec::new();
    let mut check = |role: &str, route: &str, location: RouteLocation| {
        if !is_valid_role(role) {
            problems.push(RoutingConfigError::UnknownRole {
                role: role.to_owned(),
                location: location.to_string(),
            });
            return;
        }
        match check_route(role, route, &location) {
            Err(e) => problems.push(e),
            Ok((provider, _)) => {
                if let Some(set) = credentialed
                    && !set
                        .iter()
                        .any(|c| resolve_provider(c).is_ok_and(|p| p.id == provider))
                {
                    problems.push(RoutingConfigError::ProviderUnconfigured {
                        role: role.to_owned(),
                        route: route.to_owned(),
                        provider,
                        location: location.to_string(),
                    });
                }
            }
        }
    };
    for (role, route) in &table.roles {
        check(role, route, RouteLocation::Table { role: role.clone() });
    }
    for (id, project) in &table.projects {
        for (role, route) in &project.roles {
            let location = RouteLocation::Project {
                project: id.clone(),
                role: role.clone(),
            };
            check(role, route, location);
        }
    }
    for (var, route) in env.iter().filter(|(k, _)| k.starts_with(ROUTE_ENV_PREFIX)) {
        // An override naming no role is reported with the role it spells, never skipped.
        let role = role_for_env_var(var).unwrap_or_else(|| {
            var.strip_prefix(ROUTE_ENV_PREFIX)
                .unwrap_or(var)
                .to_ascii_lowercase()
        });
        check(&role, route, RouteLocation::Env { var: var.clone() });
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_var_names_follow_the_seed_example() {
        assert_eq!(
            env_var_for_role("phase_brain:mechanical"),
            "METAFORGE_ROUTE_PHASE_BRAIN_MECHANICAL"
        );
        assert_eq!(
            role_for_env_var("METAFORGE_ROUTE_PHASE_BRAIN_MECHANICAL").as_deref(),
            Some("phase_brain:mechanical")
        );
        assert_eq!(role_for_env_var("METAFORGE_ROUTE_CHAT").as_deref(), Some("chat"));
    }

    #[test]
    fn the_shipped_example_table_is_valid() {
        let text = include_str!("../../../fixtures/model_routes.example.json");
        let table = RoutingTable::from_json(text).unwrap();
        assert!(validate_table(&table, &BTreeMap::new(), None).is_empty());
        assert_eq!(table.roles.len(), 6);
    }

    #[test]
    fn no_route_names_the_variable_that_routes_the_role() {
        for (role, variable) in [
            ("chat", "METAFORGE_ROUTE_CHAT"),
            ("phase_brain:mechanical", "METAFORGE_ROUTE_PHASE_BRAIN_MECHANICAL"),
        ] {
            let text = RoutingConfigError::NoRoute {
                role: role.to_owned(),
            }
            .to_string();
            assert!(
                text.contains(&format!("set {variable}=<provider>:<model>")),
                "{text}"
            );
            assert!(text.contains("METAFORGE_LLM_PROVIDER"), "{text}");
        }
    }
}
