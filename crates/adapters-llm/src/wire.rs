//! What every family's typed wire shares: the system text for the families with one system slot,
//! message text joined from its parts, tool-call arguments as JSON text, the temperature as it is
//! sent, and lists that may arrive as `null`.
//!
//! Each family's own wire types live next to its adapter (`openai::wire`, `anthropic::wire`, …):
//! `Serialize` request structs borrowed from the normalised [`LlmRequest`], built by one
//! `request_body` per family, so a field name is checked by the compiler and a new `LlmRole`,
//! `ToolChoice` or `ContentPart` variant fails the build in every family that must map it; and
//! `Deserialize` structs holding only the response fields the adapter reads. On the response
//! side a missing or `null` field is absent and unknown fields are ignored, but a field of the
//! wrong type is an error naming it (the pointer reads took it as absent).

use std::borrow::Cow;

use metaforge_ports::{ContentPart, LlmMessage, LlmRequest, LlmRole};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Stable system text then the per-round suffix, for families with a single system slot
/// (OpenAI, Gemini, Codex); families with system blocks send the two parts apart.
pub(crate) fn system_text(request: &LlmRequest) -> Cow<'_, str> {
    match &request.system.volatile_suffix {
        Some(suffix) if !suffix.is_empty() && !request.system.stable.is_empty() => {
            Cow::Owned(format!("{}\n\n{suffix}", request.system.stable))
        }
        Some(suffix) if !suffix.is_empty() => Cow::Borrowed(suffix),
        _ => Cow::Borrowed(&request.system.stable),
    }
}

/// The parts of `message` the families send, in order: empty text is no part (the families
/// refuse empty text parts). Every other part goes through, so a new `ContentPart` variant
/// reaches each family's exhaustive match.
pub(crate) fn sent_parts(message: &LlmMessage) -> impl Iterator<Item = &ContentPart> {
    message
        .content
        .iter()
        .filter(|part| !matches!(part, ContentPart::Text { text } if text.is_empty()))
}

/// The sent parts of `message` as `block`s; `None` when nothing is left to send, because the
/// families with block lists refuse an empty message.
pub(crate) fn blocks<'a, B>(
    message: &'a LlmMessage,
    block: impl FnMut(&'a ContentPart) -> B,
) -> Option<Vec<B>> {
    let blocks: Vec<B> = sent_parts(message).map(block).collect();
    (!blocks.is_empty()).then_some(blocks)
}

/// Text parts joined with nothing between them (borrowed when there is only one).
pub(crate) fn joined<'a>(parts: &[&'a str]) -> Cow<'a, str> {
    match parts {
        [] => Cow::Borrowed(""),
        [one] => Cow::Borrowed(one),
        [_, _, ..] => Cow::Owned(parts.concat()),
    }
}

/// Arguments as the JSON text OpenAI-style wires carry: a string is sent as it is, any other
/// value as its JSON text.
pub(crate) fn arguments_text(arguments: &Value) -> Cow<'_, str> {
    match arguments {
        Value::String(s) => Cow::Borrowed(s),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_) => {
            Cow::Owned(arguments.to_string())
        }
    }
}

/// The temperature as it is sent: widened to `f64`, as the untyped bodies sent it (`0.2_f32`
/// goes out as `0.20000000298023224`), so the bytes on the wire did not change when the bodies
/// became typed. The same number to every provider; its shortest text is a separate decision.
pub(crate) fn temperature(request: &LlmRequest) -> Option<f64> {
    request.temperature.map(f64::from)
}

/// A response list that may be missing or `null`, read as empty
/// (`#[serde(default, deserialize_with = "list")]`).
pub(crate) fn list<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// A provider's raw usage object, when it sent one (anything but an object is no usage).
pub(crate) fn usage_object(usage: Option<Value>) -> Option<Value> {
    usage.filter(Value::is_object)
}

/// A message's role as the block-message families (Anthropic, Bedrock) spell it; mapped by a
/// `match`, so a new [`LlmRole`] fails the build here.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BlockRole {
    User,
    Assistant,
}

impl From<LlmRole> for BlockRole {
    fn from(role: LlmRole) -> Self {
        match role {
            LlmRole::User => Self::User,
            LlmRole::Assistant => Self::Assistant,
        }
    }
}
