//! The server's flow generator call (FORGE-398/463/468/476): one model call through the provider
//! pipeline under the `flow_generator` role, its tokens attributed to that role and the caller,
//! and the answer returned with who served it.
//!
//! There is no untailored fallback: when no model answers the caller gets an error and no
//! proposal is made, because a flow the person believes was tailored, and was not, would be
//! approved on the strength of a tailoring that never happened.

use metaforge_domain::flow::{
    AnswerError, FlowContext, GENERATOR_ROLE, GeneratorAnswer, PromptPurpose, Question, generator_prompt,
    parse_answer,
};
use metaforge_ports::{LlmMessage, LlmRequest, SystemPrompt};

use crate::flows::GeneratedBy;
use crate::pipeline::{CallSpec, PipelineError, ProviderPipeline, UsageScope, with_usage_scope};

/// The generator's output cap: a proposal is a short JSON object.
pub const GENERATOR_MAX_TOKENS: u32 = 1024;

/// Why the generator produced nothing usable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
