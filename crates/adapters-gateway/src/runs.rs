//! [`RunBindings`] over the gateway's run and client-task routes (issue 16 item 7): `POST
//! /v1/runs`, `GET /v1/runs[/{id}[/flow-state]]`, `POST /v1/runs/{id}/approval`,
//! `GET /v1/client-tasks[/{id}]`, `POST /v1/client-tasks/{id}/{claim,submit}`.
//!
//! A 409 or 422 carrying one of the run service's codes is its refusal and comes back typed as
//! [`RunReply::Refused`] with the gateway's own code, message and details — the same the
//! in-process bindings give for the same refusal; a generic conflict (`conflict`: a task not in
//! the state the call needs) or invalid request stays the port error it is in process.
//!
//! Who the gateway records: it takes a decision's approver and a task's claimant from the key a
//! request presents, never from the body (FORGE-393). So a gate answer is sent with the
//! approver's own key (the sidecar is given the gateway's `identity:key` entries), and refused
//! here — nothing sent — when this sidecar holds no key of that identity: the gateway would
//! otherwise record the sidecar's identity as the person who decided. Claims and submissions use
//! the claimant's key when the sidecar has it, else its own.

use std::collections::BTreeMap;

use async_trait::async_trait;
use metaforge_api::{ClientTaskView, FlowStateView, RunDetail, RunSummary};
use metaforge_api::{
    GateDecisionBody, RefusalKind, RunBindings, RunQuery, RunRefused, RunReply, StartRunBody, TaskSubmission,
};
use metaforge_ports::{Claimant, ClientTaskStatus, PortError, PortErrorKind};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::client::{GatewayClient, decode, encode, map_status, segment};

/// The identity the gateway records for every request when it has no keys (open loopback).
const OPEN_GATEWAY_IDENTITY: &str = "local";

/// The codes the gateway gives a bare port error of these kinds: not the run service's refusals.
const GENERIC_CODES: &[(&str, PortErrorKind)] = &[
    ("conflict", PortErrorKind::Conflict),
    ("invalid", PortErrorKind::Invalid),
];

/// The gateway's run use cases, seen from a sidecar.
#[derive(Clone)]
pub struct RemoteRunBindings {
    client: GatewayClient,
    keys: BTreeMap<String, String>,
}

impl std::fmt::Debug for RemoteRunBindings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRunBindings")
            .field("gateway", &self.client.base_url())
            .field("identities", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl RemoteRunBindings {
    /// The bindings of the gateway `client` talks to, holding no identity's key but its own.
    pub fn new(client: GatewayClient) -> Self {
        Self {
            client,
            keys: BTreeMap::new(),
        }
    }

    /// The gateway keys of the identities this sidecar may act for (`identity → key`, the
    /// gateway's own `METAFORGE_GATEWAY_API_KEY` entries): a person authenticated at the sidecar
    /// with one of them answers a gate, or claims a task, as themselves at the gateway.
    #[must_use]
    pub fn with_identity_keys(mut self, keys: impl IntoIterator<Item = (String, String)>) -> Self {
        self.keys.extend(keys);
        self
    }

    /// The key to present for `identity`: its own; `None` (no key at all) only when the gateway
    /// is open and records everyone as `local`. `Err` when neither applies.
    fn key_of(&self, identity: &str) -> Result<Option<&str>, PortError> {
        if let Some(key) = self.keys.get(identity) {
            return Ok(Some(key.as_str()));
        }
        if !self.client.has_key() && self.keys.is_empty() && identity == OPEN_GATEWAY_IDENTITY {
            return Ok(None);
        }
        Err(PortError::new(
            PortErrorKind::Invalid,
            format!(
                "cannot answer as '{identity}' through the gateway: this sidecar holds no gateway key of '{identity}' (METAFORGE_GATEWAY_API_KEY), so the gateway would record another identity; nothing was sent"
            ),
        ))
    }

    /// The key for a claimant: theirs when held, else the sidecar's own.
    fn claimant_key(&self, claimant: &Claimant) -> Option<&str> {
        self.keys
            .get(&claimant.identity)
            .map(String::as_str)
            .or_else(|| self.client.api_key())
    }

    async fn get_json<T: DeserializeOwned>(&self, path: &str, what: &str) -> Result<T, PortError> {
        decode(self.client.send(Method::GET, path, None).await?, what)
    }

    /// A request the run service may refuse: its answer decoded, or the refusal typed.
    async fn refusable<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
        what: &str,
    ) -> Result<RunReply<T>, PortError> {
        let answer = self
            .client
            .exchange(
                method.clone(),
                path,
                body,
                key,
                &[StatusCode::CONFLICT, StatusCode::UNPROCESSABLE_ENTITY],
            )
            .await?;
        match answer {
            Ok(value) => Ok(RunReply::Done(decode(value, what)?)),
            Err((status, text)) => refusal(status, &method, path, &text).map(RunReply::Refused),
        }
    }
}

/// The query string of `pairs` with a value (`?a=1&b=2`, or empty).
fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let given: Vec<String> = pairs
        .iter()
        .filter_map(|(name, value)| value.map(|v| format!("{name}={}", segment(v))))
        .collect();
    if given.is_empty() {
        String::new()
    } else {
        format!("?{}", given.join("&"))
    }
}

/// A 409/422 body as the run service's refusal, or — for the gateway's generic codes — the port
/// error it is in process.
fn refusal(status: StatusCode, method: &Method, path: &str, text: &str) -> Result<RunRefused, PortError> {
    let body: metaforge_api::ErrorBody =
        serde_json::from_str(text).map_err(|_| map_status(status, method, path, text))?;
    if let Some((_, kind)) = GENERIC_CODES.iter().find(|(generic, _)| *generic == body.error) {
        return Err(PortError::new(*kind, body.message));
    }
    Ok(RunRefused {
        kind: if status == StatusCode::UNPROCESSABLE_ENTITY {
            RefusalKind::Invalid
        } else {
            RefusalKind::Conflict
        },
        code: body.error,
        message: body.message,
        details: body.details.filter(|d| !d.is_null()),
    })
}

/// `{runs: [...]}` / `{tasks: [...]}`: the list under `key`.
fn listed<T: DeserializeOwned>(mut value: Value, key: &str, what: &str) -> Result<Vec<T>, PortError> {
    decode(value.get_mut(key).map(Value::take).unwrap_or(Value::Null), what)
}

#[async_trait]
impl RunBindings for RemoteRunBindings {
    async fn start(&self, request: StartRunBody) -> Result<RunReply<RunDetail>, PortError> {
        let body = encode(&request, "run request")?;
        self.refusable(
            Method::POST,
            "/v1/runs",
            Some(&body),
            self.client.api_key(),
            "run",
        )
        .await
    }

    async fn list(&self, query_: RunQuery) -> Result<Vec<RunSummary>, PortError> {
        let path = format!(
            "/v1/runs{}",
            query(&[
                ("status", query_.status.map(|s| s.as_str())),
                ("project_id", query_.project_id.as_deref()),
            ])
        );
        listed(
            self.client.send(Method::GET, &path, None).await?,
            "runs",
            "run list",
        )
    }

    async fn get(&self, run_id: &str) -> Result<RunDetail, PortError> {
        self.get_json(&format!("/v1/runs/{}", segment(run_id)), "run")
            .await
    }

    async fn flow_state(&self, run_id: &str) -> Result<FlowStateView, PortError> {
        self.get_json(&format!("/v1/runs/{}/flow-state", segment(run_id)), "flow state")
            .await
    }

    async fn answer_gate(
        &self,
        run_id: &str,
        answer: GateDecisionBody,
        approver: &str,
    ) -> Result<RunReply<FlowStateView>, PortError> {
        let key = self.key_of(approver)?;
        let body = encode(&answer, "gate decision")?;
        self.refusable(
            Method::POST,
            &format!("/v1/runs/{}/approval", segment(run_id)),
            Some(&body),
            key,
            "flow state",
        )
        .await
    }

    async fn client_tasks(
        &self,
        run_id: Option<&str>,
        status: Option<ClientTaskStatus>,
    ) -> Result<Vec<ClientTaskView>, PortError> {
        let path = format!(
            "/v1/client-tasks{}",
            query(&[("run_id", run_id), ("status", status.map(|s| s.as_str()))])
        );
        listed(
            self.client.send(Method::GET, &path, None).await?,
            "tasks",
            "client task list",
        )
    }

    async fn client_task(&self, id: &str) -> Result<ClientTaskView, PortError> {
        self.get_json(&format!("/v1/client-tasks/{}", segment(id)), "client task")
            .await
    }

    async fn claim_client_task(
        &self,
        id: &str,
        claimant: &Claimant,
    ) -> Result<RunReply<ClientTaskView>, PortError> {
        self.refusable(
            Method::POST,
            &format!("/v1/client-tasks/{}/claim", segment(id)),
            None,
            self.claimant_key(claimant),
            "client task",
        )
        .await
    }

    async fn submit_client_task(
        &self,
        id: &str,
        claimant: &Claimant,
        submission: TaskSubmission,
    ) -> Result<RunReply<ClientTaskView>, PortError> {
        let body = encode(
            &metaforge_api::SubmitBody {
                summary: submission.summary,
                details: submission.details,
            },
            "task submission",
        )?;
        self.refusable(
            Method::POST,
            &format!("/v1/client-tasks/{}/submit", segment(id)),
            Some(&body),
            self.claimant_key(claimant),
            "client task",
        )
        .await
    }
}

#[cfg(test)]
mod tests;
