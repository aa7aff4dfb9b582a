//! Deterministic context compaction (MET-568): loud truncation of tool observations, structured
//! value truncation, token-budgeted chat history and folding of native tool exchanges.
//!
//! Nothing here calls a model: every fold is free, instant and reproducible. Every cut is loud —
//! a marker says how much went, and a folded list keeps its `total` and an `<key>_omitted_count`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Default history budget in tokens (METAFORGE_HISTORY_TOKENS).
pub const DEFAULT_HISTORY_TOKENS: usize = 12_000;

/// The share of the context window a turn's tool trace may use before older exchanges fold.
pub const TRACE_BUDGET_SHARE: f64 = 0.6;

/// Longest excerpt of one message kept in a summary or synopsis line, in characters.
pub const SUMMARY_EXCERPT_CHARS: usize = 200;

/// Longest summary of folded turns, in characters (~1k tokens): a long conversation's summary
/// keeps its earliest and its latest lines and says how many it left out between them.
pub const SUMMARY_MAX_CHARS: usize = 4_000;

/// Tokens estimated from text: characters / 4, rounded up.
pub fn estimate_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// The trace budget for a model's context window (60 %).
pub fn trace_token_budget(context_window_tokens: usize) -> usize {
    (context_window_tokens as f64 * TRACE_BUDGET_SHARE) as usize
}

/// Caps text at `max_chars`, appending `…[truncated N chars]` (N = characters removed).
pub fn truncate_observation(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max_chars).collect();
    format!("{kept}…[truncated {} chars]", total - max_chars)
}

/// Limits for [`truncate_value`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueLimits {
    /// Longest array kept.
    pub max_items: usize,
    /// Longest string kept (longer ones get the truncation marker).
    pub max_string_chars: usize,
}

/// Truncates a JSON value structurally: arrays longer than `max_items` keep their first items and
/// the enclosing object gets `<key>_omitted_count`; an object's `total` is always kept as is;
/// long strings get the loud marker. A cut top-level array is wrapped as
/// `{"items": [...], "items_omitted_count": n, "total": len}` so the cut stays visible.
pub fn truncate_value(value: &Value, limits: ValueLimits) -> Value {
    match value {
        Value::Array(items) if items.len() > limits.max_items => json!({
            "items": cut(items, limits),
            "items_omitted_count": items.len() - limits.max_items,
            "total": items.len(),
        }),
        other => shrink(other, limits),
    }
}

fn cut(items: &[Value], limits: ValueLimits) -> Vec<Value> {
    items
        .iter()
        .take(limits.max_items)
        .map(|v| shrink(v, limits))
        .collect()
}

fn shrink(value: &Value, limits: ValueLimits) -> Value {
    match value {
        Value::String(s) => Value::String(truncate_observation(s, limits.max_string_chars)),
        Value::Array(items) => Value::Array(cut(items, limits)),
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, v) in map {
                if key == "total" {
                    out.insert(key.clone(), v.clone());
                    continue;
                }
                out.insert(key.clone(), shrink(v, limits));
                if let Value::Array(items) = v
                    && items.len() > limits.max_items
                {
                    out.insert(
                        format!("{key}_omitted_count"),
                        json!(items.len() - limits.max_items),
                    );
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// One prior chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatTurn {
    /// user or assistant.
    pub role: String,
    /// The text.
    pub content: String,
}

/// The history to send: a summary of older turns (if any folded) and the newest turns whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetedHistory {
    /// Deterministic summary lines of the folded turns, sent as a leading context exchange.
    pub summary: Option<String>,
    /// How many turns were folded.
    pub folded_count: usize,
    /// The newest turns, whole, oldest first (the newest one truncated when it alone is over
    /// the budget).
    pub kept: Vec<ChatTurn>,
    /// Characters cut from the newest turn because it alone was over the budget (0 = none); the
    /// cut also carries the loud marker in the text.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub truncated_chars: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn one_line(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate_observation(&flat, SUMMARY_EXCERPT_CHARS)
}

/// The summary of folded turns: a header and one line per turn, `- <role>: <excerpt>`, at most
/// [`SUMMARY_MAX_CHARS`]: past that the earliest lines (facts stated first) and the latest lines
/// stay, half the room each, and one line between them counts the turns left out.
pub fn summarize_turns(turns: &[ChatTurn]) -> String {
    let header = format!("Summary of {} earlier message(s):", turns.len());
    let lines: Vec<String> = turns
        .iter()
        .map(|t| format!("- {}: {}", t.role, one_line(&t.content)))
        .collect();
    let full: usize = lines.iter().map(|l| l.chars().count() + 1).sum();
    if header.chars().count() + full <= SUMMARY_MAX_CHARS {
        return std::iter::once(header)
            .chain(lines)
            .collect::<Vec<_>>()
            .join("\n");
    }
    let half = (SUMMARY_MAX_CHARS - header.chars().count()) / 2;
    let fits = |taken: &mut usize, line: &String| {
        *taken += line.chars().count() + 1;
        *taken <= half
    };
    let mut taken = 0usize;
    let head = lines.iter().take_while(|l| fits(&mut taken, l)).count();
    let mut taken = 0usize;
    let tail = lines[head..]
        .iter()
        .rev()
        .take_while(|l| fits(&mut taken, l))
        .count();
    let omitted = lines.len() - head - tail;
    let mut out = vec![header];
    out.extend_from_slice(&lines[..head]);
    out.push(format!("- … {omitted} message(s) omitted from this summary …"));
    out.extend_from_slice(&lines[lines.len() - tail..]);
    out.join("\n")
}

/// The newest turn cut so that it fits `budget_tokens` with its loud marker (never below the
/// marker alone); returns the text and the characters cut.
fn fit_newest(content: &str, budget_tokens: usize) -> (String, usize) {
    let total = content.chars().count();
    let mut max_chars = budget_tokens.saturating_mul(4).min(total);
    loop {
        let text = truncate_observation(content, max_chars);
        if estimate_tokens(&text) <= budget_tokens || max_chars == 0 {
            return (text, total - max_chars);
        }
        max_chars -= 1;
    }
}

/// Keeps the newest turns whole while they fit `budget_tokens` (chars / 4), folding every older
/// turn into the summary. A turn is never split, and the newest turn is never folded: when it
/// alone is over the budget it is kept, cut loudly to fit.
pub fn budget_history(turns: &[ChatTurn], budget_tokens: usize) -> BudgetedHistory {
    let mut used = 0usize;
    let mut first_kept = turns.len();
    for (i, turn) in turns.iter().enumerate().rev() {
        let cost = estimate_tokens(&turn.content);
        if used + cost > budget_tokens {
            break;
        }
        used += cost;
        first_kept = i;
    }
    let mut truncated_chars = 0;
    let mut kept = turns[first_kept..].to_vec();
    if first_kept == turns.len()
        && let Some(newest) = turns.last()
    {
        first_kept -= 1;
        let (content, cut) = fit_newest(&newest.content, budget_tokens);
        truncated_chars = cut;
        kept.push(ChatTurn {
            role: newest.role.clone(),
            content,
        });
    }
    let folded = &turns[..first_kept];
    BudgetedHistory {
        summary: (!folded.is_empty()).then(|| summarize_turns(folded)),
        folded_count: folded.len(),
        kept,
        truncated_chars,
    }
}

fn message_tokens(message: &Value) -> usize {
    estimate_tokens(&message.to_string())
}

/// How many tool results a `tool` message holds that failed: its `error_count`, or 1 for
/// `"is_error": true` (the agent marks its results so; OpenAI's shape has no such field).
fn tool_errors(message: &Value) -> usize {
    if let Some(n) = message.get("error_count").and_then(Value::as_u64) {
        return usize::try_from(n).unwrap_or(usize::MAX);
    }
    usize::from(message.get("is_error").and_then(Value::as_bool) == Some(true))
}

fn synopsis_line(exchange: &[Value]) -> Vec<String> {
    let mut lines = Vec::new();
    for message in exchange {
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                let name = call
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or("tool");
                let args = call.pointer("/function/arguments").map(|a| match a {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                });
                lines.push(format!(
                    "- called {name}({})",
                    one_line(&args.unwrap_or_default())
                ));
            }
        } else if message.get("role").and_then(Value::as_str) == Some("tool") {
            let content = match message.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            let arrow = if tool_errors(message) > 0 {
                "→ error:"
            } else {
                "→"
            };
            lines.push(format!("  {arrow} {}", one_line(&content)));
        }
    }
    lines
}

/// Folds the oldest native tool exchanges (an assistant message with `tool_calls` and the `tool`
/// results after it) into one synopsis message until the messages fit `budget_tokens`. Messages
/// before the first exchange and the newest exchange are always kept. Unchanged when it fits.
/// The synopsis counts the exchanges, the messages and the failed tool results it folded (a
/// `tool` message's `error_count`, or `"is_error": true`).
pub fn fold_native_exchanges(messages: &[Value], budget_tokens: usize) -> Vec<Value> {
    let total: usize = messages.iter().map(message_tokens).sum();
    if total <= budget_tokens {
        return messages.to_vec();
    }
    let is_exchange_start = |m: &Value| {
        m.get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty())
    };
    let starts: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| is_exchange_start(m))
        .map(|(i, _)| i)
        .collect();
    let Some(&first) = starts.first() else {
        return messages.to_vec();
    };
    let head = &messages[..first];
    let head_tokens: usize = head.iter().map(message_tokens).sum();
    let mut folded_until = first;
    let mut folded_count = 0usize;
    for (n, &start) in starts.iter().enumerate().skip(1) {
        let rest: usize = messages[start..].iter().map(message_tokens).sum();
        folded_until = start;
        folded_count = n;
        if head_tokens + rest + 50 <= budget_tokens {
            break;
        }
    }
    if folded_count == 0 {
        return messages.to_vec();
    }
    let folded = &messages[first..folded_until];
    let errors: usize = folded
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .map(tool_errors)
        .sum();
    let mut lines = vec![format!(
        "[context synopsis] {folded_count} earlier tool exchange(s) folded ({} message(s), {errors} failed tool result(s)):",
        folded.len()
    )];
    for pair in starts.windows(2).take(folded_count) {
        lines.extend(synopsis_line(&messages[pair[0]..pair[1]]));
    }
    let mut out = head.to_vec();
    out.push(json!({"role": "user", "content": lines.join("\n")}));
    out.extend_from_slice(&messages[folded_until..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_marker_counts_removed_chars() {
        assert_eq!(truncate_observation("abcdef", 4), "abcd…[truncated 2 chars]");
        assert_eq!(truncate_observation("abc", 4), "abc");
    }
}
