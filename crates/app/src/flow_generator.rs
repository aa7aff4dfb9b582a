//! The server's flow generator call (FORGE-398/463/468/476): one model call through the provider
//! pipeline under the `flow_generator` role, its tokens attributed to that role and the caller,
//! and the answer returned with who served it.
//!
//! There is no untailored fallback: when no model answers the caller gets an error and no
//! proposal is made, because a flow the person believes was tailored, and was not, would be
//! approved on the strength of a tailoring that never happened.

use metaforge_domain::flow::{
    AnswerError, AskedQuestion, DEFAULT_TEMPLATE_ID, FlowContext, GENERATOR_ROLE, GeneratorAnswer,
    PromptPurpose, Question, TailorMode, TailorResult, generator_prompt, parse_answer, propose,
    questions_to_ask, required_questions, tailor_generated,
};
use metaforge_ports::{LlmMessage, LlmRequest, SystemPrompt};

use crate::flows::{FlowService, FlowServiceError, GeneratedBy, ProposalOutcome};
use crate::pipeline::{CallSpec, PipelineError, ProviderPipeline, UsageScope, with_usage_scope};

/// The generator's output cap: a proposal is a short JSON object.
pub const GENERATOR_MAX_TOKENS: u32 = 1024;

/// Why the generator produced nothing usable.
#[derive(Debug, thiserror::Error)]
pub enum GeneratorError {
    /// No model answered (every candidate failed); every attempt is inside.
    #[error("no model is reachable for the flow generator: {0}")]
    Unreachable(#[from] PipelineError),
    /// A model answered, but not with a proposal.
    #[error("{error} (model {provider}:{model})")]
    UnusableAnswer {
        /// What was wrong with it.
        error: AnswerError,
        /// Provider that answered.
        provider: String,
        /// Model that answered.
        model: String,
        /// The start of the answer, for the operator.
        excerpt: String,
    },
}

/// A read answer and the model that wrote it.
#[derive(Debug, Clone)]
pub struct GeneratorReply {
    /// The answer, read leniently.
    pub answer: GeneratorAnswer,
    /// Who served it (and the primary, when a fallback did).
    pub generated_by: GeneratedBy,
}

/// What one generator call is about.
#[derive(Debug, Clone, Copy)]
pub struct GeneratorRequest<'a> {
    /// The project's intent.
    pub intent: &'a str,
    /// Its context.
    pub context: &'a FlowContext,
    /// Requirements already known.
    pub requirements: Option<&'a serde_json::Value>,
    /// Tailor, or only ask product-specific questions.
    pub purpose: PromptPurpose,
    /// The server's open questions (questions-only), so the model does not repeat them.
    pub open_questions: &'a [Question],
    /// The authenticated caller, for usage attribution.
    pub caller: &'a str,
}

/// Asks the generator model through `pipeline` along `spec` (its role must be
/// [`GENERATOR_ROLE`]) and reads the answer leniently.
pub async fn ask_generator(
    pipeline: &ProviderPipeline,
    spec: &CallSpec,
    request: GeneratorRequest<'_>,
) -> Result<GeneratorReply, GeneratorError> {
    let prompt = generator_prompt(
        request.intent,
        request.context,
        request.requirements,
        request.purpose,
        request.open_questions,
    );
    let llm_request = LlmRequest {
        system: SystemPrompt {
            stable: prompt.system,
            volatile_suffix: None,
        },
        messages: vec![LlmMessage::user_text(prompt.user)],
        max_tokens: Some(GENERATOR_MAX_TOKENS),
        temperature: Some(0.0),
        ..LlmRequest::default()
    };
    let scope = UsageScope {
        role: Some(GENERATOR_ROLE.to_owned()),
        caller: Some(request.caller.to_owned()),
        ..UsageScope::default()
    };
    let served = with_usage_scope(scope, pipeline.complete(spec, llm_request)).await?;
    let generated_by = GeneratedBy {
        provider: served.provider.clone(),
        model: served.model.clone(),
        fell_back_from: served
            .fallback
            .as_ref()
            .map(|f| format!("{}:{}", f.primary, f.primary_model)),
    };
    let text = served.value.text;
    match parse_answer(&text) {
        Ok(answer) => {
            tracing::info!(
                event = "flow_generator_answered",
                provider = %generated_by.provider,
                model = %generated_by.model,
                fell_back_from = generated_by.fell_back_from.as_deref().unwrap_or(""),
                operations = answer.operations.len(),
                malformed = answer.malformed.len(),
                questions = answer.questions.len(),
                "flow generator answered"
            );
            Ok(GeneratorReply { answer, generated_by })
        }
        Err(error) => {
            tracing::warn!(
                event = "flow_generator_unusable_answer",
                provider = %generated_by.provider,
                model = %generated_by.model,
                error = %error,
                "flow generator answered without a proposal"
            );
            Err(GeneratorError::UnusableAnswer {
                error,
                provider: generated_by.provider,
                model: generated_by.model,
                excerpt: text.chars().take(200).collect(),
            })
        }
    }
}

/// One request for the server's generator path, as the gateway and the MCP sidecar receive it.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    /// The project's intent (required: the generator tailors to it).
    pub intent: String,
    /// Its context.
    pub context: FlowContext,
    /// Requirements already known.
    pub requirements: Option<serde_json::Value>,
    /// The authenticated caller: usage attribution and the hold's caller.
    pub caller: String,
    /// The identity the caller's transport authenticated: the hold's requester.
    pub requested_by: Option<String>,
    /// Session id for credential pinning.
    pub session: String,
}

/// What the generator path produced.
#[derive(Debug)]
pub enum Generated {
    /// Required context is missing: the server's questions, then at most three from the model.
    /// Nothing was stored.
    NeedsInput {
        /// The (empty) tailoring of the default template, carrying the required questions.
        result: Box<TailorResult>,
        /// Every question to ask, server's first.
        questions: Vec<AskedQuestion>,
        /// Why product-specific questions are absent, when they are.
        notes: Vec<String>,
    },
    /// A proposal stored as a version and held once.
    Proposed {
        /// The stored version, its hold and the provenance.
        outcome: Box<ProposalOutcome>,
        /// How the model's answer was read (e.g. an unknown template replaced).
        notes: Vec<String>,
        /// The model's product-specific questions, left open for the reviewer.
        open_questions: Vec<String>,
    },
}

/// Why the generator path made no proposal; nothing is stored in any case.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// No pipeline or no route for the role: no model can be asked.
    #[error("no model is reachable for the flow generator: {0}; no proposal was made")]
    Unavailable(String),
    /// The model call failed or its answer held no proposal.
    #[error(transparent)]
    Generator(#[from] GeneratorError),
    /// The generated tailoring was refused (invariants) or a ledger failed.
    #[error(transparent)]
    Flow(#[from] FlowServiceError),
}

/// The server generator path end to end (FORGE-398/463/468): with required context missing it
/// only asks the model for product-specific questions (and answers `needs_input` even when that
/// fails); otherwise one model call whose answer is applied leniently, validated with its context,
/// stored with origin `server` and held once with `generated_by`. `spec` is the role's call as
/// the routing rules resolve it now, or why there is none.
pub async fn generate_proposal(
    pipeline: Option<&ProviderPipeline>,
    spec: Result<CallSpec, String>,
    flows: &FlowService,
    request: &GenerateRequest,
) -> Result<Generated, GenerateError> {
    let required = required_questions(Some(&request.context));
    let purpose = if required.is_empty() {
        PromptPurpose::Tailor
    } else {
        PromptPurpose::QuestionsOnly
    };
    let reply = match (pipeline, spec) {
        (None, _) => Err(GenerateError::Unavailable(crate::pipeline::no_pipeline_reason(
            "flow_generator",
        ))),
        (Some(_), Err(reason)) => Err(GenerateError::Unavailable(reason)),
        (Some(pipeline), Ok(spec)) => {
            let asked = GeneratorRequest {
                intent: &request.intent,
                context: &request.context,
                requirements: request.requirements.as_ref(),
                purpose,
                open_questions: &required,
                caller: &request.caller,
            };
            ask_generator(pipeline, &spec, asked)
                .await
                .map_err(GenerateError::from)
        }
    };
    if !required.is_empty() {
        let (model_questions, notes) = match reply {
            Ok(reply) => (reply.answer.questions, Vec::new()),
            Err(err) => {
                tracing::warn!(event = "flow_generator_questions_absent", reason = %err, "product-specific questions are absent");
                (
                    Vec::new(),
                    vec![format!("The product-specific questions are absent: {err}")],
                )
            }
        };
        let result = propose(
            DEFAULT_TEMPLATE_ID,
            &[],
            Some(&request.context),
            TailorMode::Lenient,
        )
        .map_err(FlowServiceError::from)?;
        let questions = questions_to_ask(&result.questions, &model_questions);
        return Ok(Generated::NeedsInput {
            result: Box::new(result),
            questions,
            notes,
        });
    }
    let reply = reply?;
    let generated = tailor_generated(&reply.answer, Some(&request.context));
    let open_questions = generated.questions.iter().map(|q| q.question.clone()).collect();
    let outcome = flows
        .propose_generated(
            generated.result,
            Some(&request.context),
            reply.generated_by,
            Some(&request.intent),
            crate::flows::Requester {
                caller: &request.caller,
                identity: request.requested_by.as_deref(),
            },
        )
        .await?;
    Ok(Generated::Proposed {
        outcome: Box::new(outcome),
        notes: generated.notes,
        open_questions,
    })
}

/// The generator path behind a handle, for callers that do not own the pipeline (the MCP sidecar
/// in `metaforge up` answers `flow.propose` without operations through the gateway's generator).
#[async_trait::async_trait]
pub trait ProposalGenerator: Send + Sync {
    /// Runs [`generate_proposal`] with the owner's pipeline, routes and flow service.
    async fn generate(&self, request: GenerateRequest) -> Result<Generated, GenerateError>;
}

/// The generator over a pipeline, the routing resolver and the flow service: what the gateway's
/// propose route and the in-process MCP sidecar of `metaforge up` both call, so the two answer a
/// proposal without operations the same way.
pub struct PipelineGenerator {
    pipeline: Option<std::sync::Arc<ProviderPipeline>>,
    routes: std::sync::Arc<crate::routing::RouteResolver>,
    flows: std::sync::Arc<FlowService>,
}

impl PipelineGenerator {
    /// The generator; `pipeline` is `None` when no provider is configured (every call then
    /// answers [`GenerateError::Unavailable`] naming what to set).
    pub fn new(
        pipeline: Option<std::sync::Arc<ProviderPipeline>>,
        routes: std::sync::Arc<crate::routing::RouteResolver>,
        flows: std::sync::Arc<FlowService>,
    ) -> Self {
        Self {
            pipeline,
            routes,
            flows,
        }
    }
}

#[async_trait::async_trait]
impl ProposalGenerator for PipelineGenerator {
    async fn generate(&self, request: GenerateRequest) -> Result<Generated, GenerateError> {
        let spec = match self.pipeline {
            None => Err(crate::pipeline::no_pipeline_reason(GENERATOR_ROLE)),
            Some(_) => self
                .routes
                .role_call(GENERATOR_ROLE, request.session.clone())
                .await
                .map_err(|e| e.to_string()),
        };
        generate_proposal(self.pipeline.as_deref(), spec, &self.flows, &request).await
    }
}
