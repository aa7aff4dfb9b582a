//! Argument pre-validation against a tool's declared input schema (MET-569, FORGE-222).
//!
//! A model's malformed call should cost a message, not an invocation: missing required fields,
//! wrong JSON types and values outside a declared enum are caught before the handler (or the MCP
//! server) runs, and returned as an `invalid_arguments` envelope the model can correct from. A
//! tool that declares no schema keeps the permissive `{"type":"object"}` and is not checked.

use serde_json::{Map, Value};

/// Every problem found in `arguments`, as human-readable lines naming the field; empty when valid.
pub fn validate_arguments(schema: &Value, arguments: &Map<String, Value>) -> Vec<String> {
    let mut errors = Vec::new();
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for field in required.iter().filter_map(Value::as_str) {
            if !arguments.contains_key(field) {
                errors.push(format!("{field}: required field is missing"));
            }
        }
    }
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return errors;
    };
    for (field, value) in arguments {
        let Some(spec) = properties.get(field) else {
            if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
                errors.push(format!("{field}: unknown field"));
            }
            continue;
        };
        check_value(field, spec, value, &mut errors);
    }
    errors
}

fn check_value(path: &str, spec: &Value, value: &Value, errors: &mut Vec<String>) {
    if let Some(expected) = spec.get("type") {
        let allowed: Vec<&str> = match expected {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !allowed.is_empty() && !allowed.iter().any(|t| type_matches(t, value)) {
            errors.push(format!(
                "{path}: expected {}, got {}",
                allowed.join(" or "),
                type_name(value)
            ));
            return;
        }
    }
    if let Some(choices) = spec
        .get("enum")
        .and_then(Value::as_array)
        .filter(|choices| !choices.contains(value))
    {
        errors.push(format!(
            "{path}: {value} is not one of {}",
            Value::from(choices.clone())
        ));
    }
    if let (Some(items), Value::Array(values)) = (spec.get("items"), value) {
        for (i, item) in values.iter().enumerate() {
            check_value(&format!("{path}[{i}]"), items, item, errors);
        }
    }
}

fn type_matches(t: &str, value: &Value) -> bool {
    match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.as_i64().is_some() || value.as_u64().is_some(),
        _ => true,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_kind_of_bad_argument_is_named() {
        let schema = json!({
            "type": "object",
            "required": ["query"],
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "mode": {"type": "string", "enum": ["fast", "full"]},
                "tags": {"type": "array", "items": {"type": "string"}}
            }
        });
        let table = [
            (json!({"query": "x"}), vec![]),
            (json!({}), vec!["query: required field is missing"]),
            (json!({"query": 3}), vec!["query: expected string, got number"]),
            (
                json!({"query": "x", "limit": 1.5}),
                vec!["limit: expected integer, got number"],
            ),
            (
                json!({"query": "x", "mode": "slow"}),
                vec!["mode: \"slow\" is not one of [\"fast\",\"full\"]"],
            ),
            (
                json!({"query": "x", "tags": ["a", 1]}),
                vec!["tags[1]: expected string, got number"],
            ),
        ];
        for (args, expected) in table {
            let args = args.as_object().unwrap().clone();
            assert_eq!(validate_arguments(&schema, &args), expected, "{args:?}");
        }
    }

    #[test]
    fn a_tool_without_a_schema_is_not_validated() {
        let args = json!({"anything": [1, 2]}).as_object().unwrap().clone();
        assert!(validate_arguments(&json!({"type": "object"}), &args).is_empty());
    }
}
