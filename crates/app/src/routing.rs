//! The routing resolver: the per-role route a call takes now, under the domain's routing rules,
//! over the deployment's table, overrides, credentials and the durable selection.
//!
//! The gateway's routing view, the chat completions route, the flow generator and the agent loop
//! all resolve through this one type, so what a view shows and what a call does cannot disagree.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use metaforge_domain::providers::{model_family_mismatch, parse_route, resolve_provider};
use metaforge_domain::routing::{ROLES, RouteCall, RoutingInputs, RoutingTable, resolve_route};
use metaforge_ports::{PortError, SelectionStore};

use crate::pipeline::{CallSpec, Candidate};

/// What routes are computed from; built once by the binary from its configuration.
pub struct RouteResolver {
    /// The routing table (`METAFORGE_MODEL_ROUTES_PATH`, or the shipped empty one).
    pub table: RoutingTable,
    /// The `METAFORGE_ROUTE_*` environment overrides.
    pub env_routes: BTreeMap<String, String>,
    /// Providers with credentials on this deployment.
    pub credentialed: BTreeSet<String>,
    /// The deployment default `provider:model`, if any.
    pub default_route: Option<String>,
    /// The durable selection.
    pub selection: Arc<dyn SelectionStore>,
}

/// Why a role has no route now.
#[derive(Debug, thiserror::Error)]
pub enum RouteFailure {
    /// The routing rules refused every layer (the message names the role and why).
    #[error("no route for role '{role}': {reason}")]
    NoRoute {
        /// The role asked for.
        role: String,
        /// The routing rules' reason.
        reason: String,
    },
    /// The durable selection could not be read.
    #[error(transparent)]
    Store(#[from] PortError),
}

impl RouteResolver {
    /// The routing rules' inputs over this configuration and a selection read from the store.
    pub fn inputs<'a>(&'a self, selection: Option<&'a str>) -> RoutingInputs<'a> {
        RoutingInputs {
            table: &self.table,
            env: &self.env_routes,
            credentialed: Some(&self.credentialed),
            selection,
            default: self.default_route.as_deref(),
        }
    }

    /// Every role worth resolving: the seed's roles, then the table's own, each once.
    pub fn role_names(&self) -> Vec<String> {
        let mut names: Vec<String> = ROLES.iter().map(|r| (*r).to_owned()).collect();
        for role in self.table.roles.keys() {
            if !names.contains(role) {
                names.push(role.clone());
            }
        }
        names
    }

    /// The stored selection, unless it fails the family check: `(usable, why it was ignored)`.
    pub async fn usable_selection(&self) -> Result<(Option<String>, Option<String>), PortError> {
        let Some(route) = self.selection.get().await? else {
            return Ok((None, None));
        };
        match check_selection(&route) {
            Ok(()) => Ok((Some(route), None)),
            Err(reason) => Ok((
                None,
                Some(format!("stored selection '{route}' is ignored: {reason}")),
            )),
        }
    }

    /// A call for `role` as it resolves now (so a selection stored a second ago is honoured):
    /// the resolved route goes first, the role's fallback chain stays behind it.
    pub async fn role_call(&self, role: &str, session_id: String) -> Result<CallSpec, RouteFailure> {
        self.call_for(
            RouteCall {
                role: role.to_owned(),
                ..RouteCall::default()
            },
            session_id,
        )
        .await
    }

    /// A call as `call` resolves now (project routes, a phase's own model, disciplines).
    pub async fn call_for(&self, call: RouteCall, session_id: String) -> Result<CallSpec, RouteFailure> {
        let (selection, _) = self.usable_selection().await?;
        let inputs = self.inputs(selection.as_deref());
        let role = call.role.clone();
        let resolved = resolve_route(&inputs, &call).map_err(|e| RouteFailure::NoRoute {
            role: role.clone(),
            reason: e.to_string(),
        })?;
        Ok(CallSpec {
            role,
            explicit: Some(Candidate {
                provider: resolved.provider,
                model: resolved.model,
            }),
            session_id,
        })
    }
}

/// Whether `route` may be stored as the durable selection: a `provider:model` whose provider is
/// known and whose family can serve the model; `Err` carries the reason.
pub fn check_selection(route: &str) -> Result<(), String> {
    let parsed = parse_route(route).map_err(|e| e.to_string())?;
    let provider = resolve_provider(&parsed.provider).map_err(|e| e.to_string())?;
    match model_family_mismatch(provider, &parsed.model) {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}
