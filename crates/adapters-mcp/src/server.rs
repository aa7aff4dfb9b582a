//! The sidecar's MCP server: protocol plumbing over a [`ToolHost`].
//!
//! The host (in `metaforge-app`) decides what a tool does; this module decides who is calling
//! (from the connection, never from arguments) and how a question for a person reaches them:
//! a 2025-11-25 client that declared elicitation is asked with `elicitation/create`, a 2026-07-28
//! client gets an `InputRequiredResult` and answers on its retry, any other client receives the
//! questions as the tool result.

use std::sync::Arc;

use std::sync::OnceLock;

use metaforge_ports::{
    CallFacts, CallerClass, CallerContext, CallerGrants, ClassClaim, HostCallOutcome, InputChannel,
    InputQuestion, PortError, PortErrorKind, ToolHost,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ElicitRequest, ElicitRequestParams, ElicitationAction,
    ElicitationSchema, GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
    InputRequest, InputRequiredResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, Prompt, PromptArgument, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents, ResourceTemplate,
    Role, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Map, Value};

use crate::convert::{result_from_output, tool_from_descriptor};

/// The header a MetaForge service presents its key in (also accepted as `Authorization: Bearer`).
pub const SERVICE_KEY_HEADER: &str = "x-metaforge-service-key";
/// The header carrying a stable MetaForge session id across MCP sessions (FORGE-584).
pub const SESSION_HEADER: &str = "x-metaforge-session";
/// The header naming the project a call works in (the service key's run check, FORGE-487; a
/// client-task session's run, FORGE-584).
pub const PROJECT_HEADER: &str = "x-metaforge-project";
/// The key the answers to a tool's questions are merged under in its re-submitted arguments.
pub const ANSWERS_ARGUMENT: &str = "answers";
/// The `inputRequests` key the sidecar uses for its one elicitation.
const INPUT_REQUEST_KEY: &str = "answers";

/// How this server instance was reached, which bounds the caller classes it can grant.
#[derive(Debug, Clone)]
pub enum Connection {
    /// stdio: the caller is the local user.
    Stdio,
    /// Streamable HTTP: remote, or service when the request carries the configured key.
    Http {
        /// `METAFORGE_MCP_SERVICE_KEY`, when set.
        service_key: Option<Arc<str>>,
    },
}

/// The identity of the client key an HTTP request presented, put on the request by the key
/// check (`serve::require_key`) and read back here: who the call is from, for what it records
/// (a gate's approver, a task's claimant). Never taken from a header the client writes itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticatedIdentity(pub Arc<str>);

/// Where a composition puts the [`CallerGrants`] every HTTP session asks; shared by the sessions
/// a listener creates, settable once after the listener is bound.
pub type GrantsCell = Arc<OnceLock<Arc<dyn CallerGrants>>>;

/// The rmcp server handler for one connection (stdio) or one HTTP session.
#[derive(Clone)]
pub struct SidecarServer {
    host: Arc<dyn ToolHost>,
    connection: Connection,
    grants: GrantsCell,
}

/// A header's value as text, trimmed, when present and not empty.
fn header<'a>(parts: Option<&'a http::request::Parts>, name: &str) -> Option<&'a str> {
    parts
        .and_then(|p| p.headers.get(name))
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

impl SidecarServer {
    /// A server handing every call to `host`.
    pub fn new(host: Arc<dyn ToolHost>, connection: Connection) -> Self {
        Self {
            host,
            connection,
            grants: GrantsCell::default(),
        }
    }

    /// Confirms the service key's run (FORGE-487) and client-task sessions (FORGE-584) with
    /// `grants` (shared by every session of a listener). Without grants a service-key caller is
    /// `untrusted` (it cannot be confirmed) and no session is ever a client task.
    #[must_use]
    pub fn with_grants(mut self, grants: GrantsCell) -> Self {
        self.grants = grants;
        self
    }

    /// Who is calling: the class the connection earns, confirmed with the grants where it claims
    /// more (a service key naming a run, a session holding a client task), the session and the
    /// authenticated identity. The request's arguments play no part.
    async fn caller(
        &self,
        context: &RequestContext<RoleServer>,
        tool: Option<&str>,
    ) -> (CallerContext, CallFacts) {
        let parts = context.extensions.get::<http::request::Parts>();
        let stable = header(parts, SESSION_HEADER);
        let session = stable
            .or_else(|| header(parts, "mcp-session-id"))
            .map(str::to_owned);
        let identity = parts
            .and_then(|p| p.extensions.get::<AuthenticatedIdentity>())
            .map(|i| i.0.to_string());
        let class = match &self.connection {
            Connection::Stdio => CallerClass::Local,
            Connection::Http { service_key } => {
                let base = classify_http(service_key.as_deref(), parts.map(|p| &p.headers));
                let claim = |class: CallerClass, session: &str| ClassClaim {
                    class,
                    session: session.to_owned(),
                    project: header(parts, PROJECT_HEADER).map(str::to_owned),
                    identity: identity.clone(),
                    tool: tool.map(str::to_owned),
                };
                match (base, self.grants.get(), stable) {
                    (CallerClass::Service, Some(grants), Some(run)) => {
                        if grants.confirm(&claim(CallerClass::Service, run)).await {
                            CallerClass::Service
                        } else {
                            CallerClass::Untrusted
                        }
                    }
                    (CallerClass::Service, grants, run) => {
                        tracing::warn!(
                            event = "mcp_service_call_unconfirmed",
                            tool,
                            reason = if grants.is_none() {
                                "no gateway is composed to confirm the run"
                            } else if run.is_none() {
                                "the call names no run (X-MetaForge-Session)"
                            } else {
                                "unconfirmed"
                            },
                            "a service-key call that cannot be confirmed is untrusted (its writes are held)"
                        );
                        CallerClass::Untrusted
                    }
                    (CallerClass::Remote, Some(grants), Some(session)) => {
                        if grants.confirm(&claim(CallerClass::ClientTask, session)).await {
                            CallerClass::ClientTask
                        } else {
                            CallerClass::Remote
                        }
                    }
                    (
                        class @ (CallerClass::Local
                        | CallerClass::Remote
                        | CallerClass::Untrusted
                        | CallerClass::ClientTask),
                        _,
                        _,
                    ) => class,
                }
            }
        };
        let caller = CallerContext {
            class,
            session,
            input_channel: input_channel(context),
            identity,
        };
        // A client never vouches for its own approval: `approved_hold` is for in-process callers.
        let facts = CallFacts {
            answers: None,
            approved_hold: None,
        };
        (caller, facts)
    }
}

/// The caller class an HTTP request earns: the right service key makes it `service`; a wrong key
/// makes it `untrusted` (it claimed something it could not prove); no key is `remote`.
pub fn classify_http(service_key: Option<&str>, headers: Option<&http::HeaderMap>) -> CallerClass {
    let presented = headers.and_then(|h| {
        h.get(SERVICE_KEY_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| {
                h.get(http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .map(bearer_credential)
                    .filter(|k| !k.is_empty())
                    .map(str::to_owned)
            })
    });
    match (service_key, presented) {
        (_, None) => CallerClass::Remote,
        (Some(key), Some(given)) if constant_time_eq(key.as_bytes(), given.as_bytes()) => {
            CallerClass::Service
        }
        (_, Some(_)) => CallerClass::Untrusted,
    }
}

/// The credential of an `Authorization` value: `Bearer <key>`, the scheme compared
/// case-insensitively (RFC 9110 §11.1); any other scheme presents nothing usable (empty).
pub(crate) fn bearer_credential(value: &str) -> &str {
    let value = value.trim_start();
    match value.split_once([' ', '\t']) {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
        _ => "",
    }
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn input_channel(context: &RequestContext<RoleServer>) -> InputChannel {
    let modern = context.protocol_version().is_some_and(|v| !v.has_initialize());
    if modern {
        let declares = context
            .meta
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some());
        return if declares {
            InputChannel::InputRequired
        } else {
            InputChannel::None
        };
    }
    let declares = context
        .peer
        .peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some());
    if declares {
        InputChannel::Elicitation
    } else {
        InputChannel::None
    }
}

fn mcp_error(e: PortError) -> McpError {
    match e.kind {
        PortErrorKind::NotFound => McpError::invalid_params(e.message, None),
        PortErrorKind::Invalid => McpError::invalid_params(e.message, None),
        PortErrorKind::Conflict
        | PortErrorKind::Unavailable
        | PortErrorKind::Corrupt
        | PortErrorKind::Internal => McpError::internal_error(e.message, None),
    }
}

/// The form a person fills in: one string field per question (an enum when it is a choice),
/// every question required but the optional ones.
fn elicitation_schema(questions: &[InputQuestion]) -> Result<ElicitationSchema, McpError> {
    let mut properties = Map::new();
    for q in questions {
        let mut field = serde_json::json!({"type": "string", "title": q.id, "description": q.prompt});
        if !q.choices.is_empty() {
            field["enum"] = Value::from(q.choices.clone());
        }
        properties.insert(q.id.clone(), field);
    }
    let required: Vec<&str> = questions
        .iter()
        .filter(|q| !q.optional)
        .map(|q| q.id.as_str())
        .collect();
    serde_json::from_value(serde_json::json!({
        "type": "object", "properties": properties, "required": required
    }))
    .map_err(|e| McpError::internal_error(format!("elicitation schema: {e}"), None))
}

fn with_answers(mut arguments: Map<String, Value>, answers: Value) -> Map<String, Value> {
    arguments.insert(ANSWERS_ARGUMENT.to_owned(), answers);
    arguments
}

impl SidecarServer {
    /// Serves one `tools/call` (inside its span, [`crate::trace_meta::tool_call_span`]): the
    /// host's decision, and the person's answers when the tool needs input.
    async fn serve_tool_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tool = request.name.to_string();
        let (caller, mut facts) = self.caller(&context, Some(&tool)).await;
        let mut arguments = request.arguments.clone().unwrap_or_default();
        // A 2026-07-28 retry carries the person's answers as the elicitation's result.
        if let Some(answer) = request
            .input_responses
            .as_ref()
            .and_then(|r| r.get(INPUT_REQUEST_KEY))
        {
            let accepted = answer.get("action").and_then(Value::as_str) == Some("accept");
            if let (true, Some(content)) = (accepted, answer.get("content")) {
                facts.answers = content.as_object().cloned();
                arguments = with_answers(arguments, content.clone());
            }
        }
        // A client that gives up sends notifications/cancelled; dropping the host's future then
        // stops the work (and a held call resolves its hold as canceled).
        let outcome = tokio::select! {
            outcome = self.host.call_with(&caller, &facts, &tool, arguments.clone()) => outcome.map_err(mcp_error)?,
            () = context.ct.cancelled() => {
                tracing::info!(event = "mcp_call_cancelled_by_client", tool);
                return Err(McpError::internal_error("request cancelled by the client", None));
            }
        };
        let (message, questions, fallback) = match outcome {
            HostCallOutcome::Done(output) => {
                return Ok(CallToolResponse::Complete(
                    result_from_output(output).map_err(mcp_error)?,
                ));
            }
            HostCallOutcome::NeedsInput {
                message,
                questions,
                result,
            } => (message, questions, result),
        };
        match caller.input_channel {
            InputChannel::InputRequired if request.input_responses.is_none() => {
                let params = ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message,
                    requested_schema: elicitation_schema(&questions)?,
                };
                let mut requests = std::collections::BTreeMap::new();
                requests.insert(
                    INPUT_REQUEST_KEY.to_owned(),
                    InputRequest::Elicitation(ElicitRequest::new(params)),
                );
                Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                    Some(requests),
                    Some(format!("{tool}:needs_input")),
                )))
            }
            InputChannel::Elicitation => {
                let params = ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message,
                    requested_schema: elicitation_schema(&questions)?,
                };
                let answer = context.peer.create_elicitation(params).await;
                match answer {
                    Ok(result) if result.action == ElicitationAction::Accept => {
                        let answers = result.content.unwrap_or(Value::Object(Map::new()));
                        let facts = CallFacts {
                            answers: Some(answers.as_object().cloned().unwrap_or_default()),
                            ..facts
                        };
                        let again = self
                            .host
                            .call_with(&caller, &facts, &tool, with_answers(arguments, answers))
                            .await
                            .map_err(mcp_error)?;
                        let output = match again {
                            HostCallOutcome::Done(output) => output,
                            HostCallOutcome::NeedsInput { result, .. } => result,
                        };
                        Ok(CallToolResponse::Complete(
                            result_from_output(output).map_err(mcp_error)?,
                        ))
                    }
                    Ok(_declined) => Ok(CallToolResponse::Complete(
                        result_from_output(fallback).map_err(mcp_error)?,
                    )),
                    Err(e) => {
                        tracing::warn!(event = "mcp_elicitation_failed", tool, error = %e);
                        Ok(CallToolResponse::Complete(
                            result_from_output(fallback).map_err(mcp_error)?,
                        ))
                    }
                }
            }
            // The client answered already, or cannot be asked: the tool's own fallback answer.
            InputChannel::InputRequired | InputChannel::None => Ok(CallToolResponse::Complete(
                result_from_output(fallback).map_err(mcp_error)?,
            )),
        }
    }
}

impl ServerHandler for SidecarServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::default();
        info.capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_prompts()
            .build();
        crate::skills::declare(&mut info.capabilities, &self.host.skills());
        info.server_info = Implementation::new("metaforge", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "MetaForge design flows. Writes are held for a person; no tool here approves anything."
                .to_owned(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let (caller, _) = self.caller(&context, None).await;
        let class = caller.class;
        let tools = self
            .host
            .tools(class)
            .iter()
            .map(tool_from_descriptor)
            .collect::<Result<Vec<_>, _>>()
            .map_err(mcp_error)?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let span = crate::trace_meta::tool_call_span(&context.meta, &request.name);
        tracing::Instrument::instrument(self.serve_tool_call(request, context), span).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let prompts = self
            .host
            .prompts()
            .into_iter()
            .map(|p| {
                let arguments = p
                    .arguments
                    .into_iter()
                    .map(|a| {
                        PromptArgument::new(a.name)
                            .with_description(a.description)
                            .with_required(a.required)
                    })
                    .collect::<Vec<_>>();
                let mut prompt = Prompt::new(p.name, Some(p.description), Some(arguments));
                prompt.title = p.title;
                prompt
            })
            .collect();
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let arguments = request.arguments.unwrap_or_default();
        let text = self
            .host
            .prompt(&request.name, &arguments)
            .await
            .map_err(mcp_error)?;
        Ok(GetPromptResponse::Complete(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text.text)])
                .with_description(text.description),
        ))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(crate::skills::listed(
            &self.host.skills(),
        )))
    }

    async fn list_skills(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListSkillsResult, McpError> {
        let skills = self.host.skills();
        Ok(rmcp::model::ListSkillsResult::with_all_items(
            skills.iter().map(crate::skills::entry).collect(),
        ))
    }

    async fn get_skill(
        &self,
        request: rmcp::model::GetSkillRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetSkillResult, McpError> {
        self.host
            .skills()
            .iter()
            .map(crate::skills::entry)
            .find(|skill| skill.uri == request.uri)
            .map(rmcp::model::GetSkillResult::new)
            .ok_or_else(|| McpError::invalid_params(format!("no skill is served at {}", request.uri), None))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let templates = self
            .host
            .resource_templates()
            .into_iter()
            .map(|t| {
                ResourceTemplate::new(t.uri_template, t.name)
                    .with_description(t.description)
                    .with_mime_type(t.mime_type)
            })
            .collect();
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if let Some(file) = crate::skills::read(&self.host.skills(), &request.uri) {
            return Ok(ReadResourceResponse::Complete(file));
        }
        match self.host.read_resource(&request.uri).await {
            Ok(text) => Ok(ReadResourceResponse::Complete(ReadResourceResult::new(vec![
                ResourceContents::TextResourceContents {
                    uri: text.uri,
                    mime_type: Some(text.mime_type),
                    text: text.text,
                    meta: None,
                },
            ]))),
            Err(e) if e.kind == PortErrorKind::NotFound => Err(McpError::resource_not_found(
                e.message,
                Some(serde_json::json!({"uri": request.uri})),
            )),
            Err(e) => Err(mcp_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn http_caller_class_comes_from_the_service_key_only() {
        type Case<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)], CallerClass);
        let table: [Case<'_>; 7] = [
            (None, &[], CallerClass::Remote),
            (Some("k1"), &[], CallerClass::Remote),
            (Some("k1"), &[(SERVICE_KEY_HEADER, "k1")], CallerClass::Service),
            (
                Some("k1"),
                &[("authorization", "Bearer k1")],
                CallerClass::Service,
            ),
            (Some("k1"), &[(SERVICE_KEY_HEADER, "k2")], CallerClass::Untrusted),
            (Some("k1"), &[(SERVICE_KEY_HEADER, "k1x")], CallerClass::Untrusted),
            (None, &[(SERVICE_KEY_HEADER, "k1")], CallerClass::Untrusted),
        ];
        for (key, pairs, expected) in table {
            let h = headers(pairs);
            assert_eq!(classify_http(key, Some(&h)), expected, "{key:?} {pairs:?}");
        }
    }

    #[test]
    fn elicitation_form_has_one_required_field_per_question() {
        let schema = elicitation_schema(&[
            InputQuestion {
                id: "target".into(),
                prompt: "Which board?".into(),
                choices: vec!["a".into(), "b".into()],
                optional: false,
            },
            InputQuestion {
                id: "why".into(),
                prompt: "Why?".into(),
                choices: vec![],
                optional: false,
            },
        ])
        .unwrap();
        let json = serde_json::to_value(&schema).unwrap();
        assert_eq!(json["required"], serde_json::json!(["target", "why"]));
        assert_eq!(
            json["properties"]["target"]["enum"],
            serde_json::json!(["a", "b"])
        );
    }
}
