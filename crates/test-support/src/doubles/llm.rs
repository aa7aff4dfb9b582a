//! A scripted model: an `LlmProvider` that answers from a queue, records every request, and can
//! fail or hang on cue (for cancellation tests).

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;
use futures::StreamExt;
use metaforge_ports::{
    ApiFamily, Credential, FinishReason, LlmEventStream, LlmProvider, LlmRequest, LlmResponse, ProviderError,
    ProviderErrorKind, RawUsage, StreamEvent, ToolCall,
};
use serde_json::{Value, json};

use super::lock;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum ScriptStep {
    /// Answer with this response.
    Reply(LlmResponse),
    /// Fail with this error.
    Fail(ProviderError),
    /// Never answer (the caller must cancel).
    Hang,
}

impl ScriptStep {
    /// A text answer reporting 10 prompt and 5 completion tokens (OpenAI usage shape).
    pub fn text(text: impl Into<String>) -> Self {
        Self::Reply(LlmResponse {
            text: text.into(),
            tool_calls: Vec::new(),
            finish: Some(FinishReason::Stop),
            usage: Some(openai_usage(10, 5)),
            model: None,
        })
    }

    /// An answer asking for tool calls `(id, name, arguments)`, in order.
    pub fn calls(calls: &[(&str, &str, Value)]) -> Self {
        Self::Reply(LlmResponse {
            text: String::new(),
            tool_calls: calls
                .iter()
                .map(|(id, name, arguments)| ToolCall {
                    id: (*id).to_owned(),
                    name: (*name).to_owned(),
                    arguments: arguments.clone(),
                })
                .collect(),
            finish: Some(FinishReason::ToolCalls),
            usage: Some(openai_usage(10, 5)),
            model: None,
        })
    }

    /// The same step reporting `prompt` and `completion` tokens instead.
    pub fn with_usage(self, prompt: u64, completion: u64) -> Self {
        match self {
            Self::Reply(mut response) => {
                response.usage = Some(openai_usage(prompt, completion));
                Self::Reply(response)
            }
            other @ (Self::Fail(_) | Self::Hang) => other,
        }
    }
}

fn openai_usage(prompt: u64, completion: u64) -> RawUsage {
    RawUsage {
        family: ApiFamily::OpenaiCompatible,
        raw: json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}),
    }
}

/// A provider answering from a script (unit tests only). An exhausted script is a `BadRequest`
/// naming it, so a loop that calls once too often fails loudly.
#[derive(Debug)]
pub struct ScriptedLlm {
    family: ApiFamily,
    steps: Mutex<VecDeque<ScriptStep>>,
    requests: Mutex<Vec<LlmRequest>>,
}

impl ScriptedLlm {
    /// An OpenAI-compatible provider answering `steps` in order.
    pub fn new(steps: Vec<ScriptStep>) -> Self {
        Self {
            family: ApiFamily::OpenaiCompatible,
            steps: Mutex::new(steps.into()),
            requests: Mutex::new(Vec::new()),
        }
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<LlmRequest> {
        lock(&self.requests).clone()
    }

    /// Steps not yet answered.
    pub fn remaining(&self) -> usize {
        lock(&self.steps).len()
    }

    async fn next(&self, request: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        lock(&self.requests).push(request.clone());
        let step = lock(&self.steps).pop_front();
        match step {
            Some(ScriptStep::Reply(response)) => Ok(response),
            Some(ScriptStep::Fail(error)) => Err(error),
            Some(ScriptStep::Hang) => futures::future::pending().await,
            None => Err(ProviderError::new(
                ProviderErrorKind::BadRequest,
                "the scripted model's script is exhausted",
            )),
        }
    }
}

#[async_trait]
impl LlmProvider for ScriptedLlm {
    fn family(&self) -> ApiFamily {
        self.family
    }

    async fn complete(
        &self,
        request: &LlmRequest,
        _credential: Option<&Credential>,
    ) -> Result<LlmResponse, ProviderError> {
        self.next(request).await
    }

    async fn stream(
        &self,
        request: &LlmRequest,
        _credential: Option<&Credential>,
    ) -> Result<LlmEventStream, ProviderError> {
        let response = self.next(request).await?;
        let mut events = Vec::new();
        if !response.text.is_empty() {
            events.push(Ok(StreamEvent::TextDelta { text: response.text }));
        }
        for (index, call) in (0u32..).zip(response.tool_calls) {
            events.push(Ok(StreamEvent::ToolCallStart {
                index,
                id: call.id,
                name: call.name,
            }));
            events.push(Ok(StreamEvent::ToolCallArgumentsDelta {
                index,
                delta: call.arguments.to_string(),
            }));
            events.push(Ok(StreamEvent::ToolCallEnd { index }));
        }
        if let Some(usage) = response.usage {
            events.push(Ok(StreamEvent::Usage { usage }));
        }
        events.push(Ok(StreamEvent::Finish {
            reason: response.finish.unwrap_or(FinishReason::Stop),
        }));
        Ok(futures::stream::iter(events).boxed())
    }
}
