//! Prompt-caching layout (FORGE-478): tool schemas sorted by name with sorted keys, then the
//! system prompt, form a prefix that stays byte-identical across the steps of a turn.
//!
//! Providers cache by exact prefix. Anything time- or id-dependent belongs in the volatile
//! suffix; this module never reads a clock or an id, so the prefix depends on its inputs only.

use metaforge_ports::{LlmRequest, ModelTool};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Returns `value` with every object's keys in sorted order (arrays keep their order).
pub fn sort_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .filter_map(|k| map.get(k).map(|v| (k.clone(), sort_keys(v))))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sort_keys).collect()),
        other => other.clone(),
    }
}

/// Tools sorted by name, each schema with sorted keys.
pub fn stable_tools(tools: &[ModelTool]) -> Vec<ModelTool> {
    let mut sorted: Vec<ModelTool> = tools
        .iter()
        .map(|t| ModelTool {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: sort_keys(&t.parameters),
        })
        .collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    sorted
}

/// The byte-exact cached prefix: the sorted tool schemas, then the stable system prompt.
pub fn stable_prefix_bytes(tools: &[ModelTool], stable_system: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for tool in tools {
        let schema = serde_json::json!({
            "name": tool.name, "description": tool.description, "parameters": tool.parameters});
        out.extend_from_slice(sort_keys(&schema).to_string().as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(stable_system.as_bytes());
    out
}

/// Lays a request out for caching: sorted tools and a `prompt_cache_key` (a hash of the
/// stable prefix). The volatile suffix and the messages are untouched.
pub fn layout_for_caching(mut request: LlmRequest) -> LlmRequest {
    request.tools = stable_tools(&request.tools);
    let digest = Sha256::digest(stable_prefix_bytes(&request.tools, &request.system.stable));
    let mut key = hex::encode(digest);
    key.truncate(32);
    request.prompt_cache_key = Some(format!("mf-{key}"));
    request
}

#[cfg(test)]
mod tests {
    use super::*;
    use metaforge_ports::SystemPrompt;
    use serde_json::json;

    fn tool(name: &str, params: Value) -> ModelTool {
        ModelTool {
            name: name.into(),
            description: format!("{name} tool"),
            parameters: params,
        }
    }

    #[test]
    fn prefix_is_byte_identical_whatever_the_tool_order_key_order_or_suffix() {
        let a = LlmRequest {
            system: SystemPrompt {
                stable: "You are MetaForge.".into(),
                volatile_suffix: Some("round 1: 3 tools dropped".into()),
            },
            tools: vec![
                tool(
                    "zeta",
                    json!({"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "number"}}}),
                ),
                tool("alpha", json!({"properties": {}, "type": "object"})),
            ],
            ..LlmRequest::default()
        };
        let mut b = a.clone();
        b.tools.reverse();
        b.tools[1].parameters =
            json!({"properties": {"a": {"type": "number"}, "b": {"type": "string"}}, "type": "object"});
        b.system.volatile_suffix = Some("round 2: different note".into());
        let (a, b) = (layout_for_caching(a), layout_for_caching(b));
        assert_eq!(
            stable_prefix_bytes(&a.tools, &a.system.stable),
            stable_prefix_bytes(&b.tools, &b.system.stable)
        );
        assert_eq!(a.prompt_cache_key, b.prompt_cache_key);
        assert_eq!(a.tools[0].name, "alpha");
        assert_eq!(
            serde_json::to_string(&a.tools[1].parameters).unwrap(),
            r#"{"properties":{"a":{"type":"number"},"b":{"type":"string"}},"type":"object"}"#
        );
    }

    #[test]
    fn a_changed_system_prompt_changes_the_cache_key() {
        let a = layout_for_caching(LlmRequest {
            system: SystemPrompt {
                stable: "one".into(),
                volatile_suffix: None,
            },
            ..LlmRequest::default()
        });
        let b = layout_for_caching(LlmRequest {
            system: SystemPrompt {
                stable: "two".into(),
                volatile_suffix: None,
            },
            ..LlmRequest::default()
        });
        assert_ne!(a.prompt_cache_key, b.prompt_cache_key);
    }
}
