//! Canonical JSON and its SHA-256: the one byte form every hash and exact comparison in MetaForge
//! is taken over (flow versions, twin content hashes, the same-turn tool-call key).
//!
//! It lives in `ports` because adapters (the SQLite and FalkorDB twins, the flow-version store)
//! and the domain must agree on the same bytes, and adapters never see the domain. Golden hashes
//! of the templates are pinned against this form, so there is exactly one implementation.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Canonical JSON text of `value`: object keys sorted by their UTF-8 bytes, no insignificant
/// whitespace, strings and numbers as serde_json writes them.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// Lower-case hex SHA-256 of `text`.
pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Lower-case hex SHA-256 of the canonical JSON of `value`.
pub fn canonical_sha256(value: &Value) -> String {
    sha256_hex(&canonical_json(value))
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, inner)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_scalar(&Value::String(key.clone()), out);
                out.push(':');
                write_canonical(inner, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => write_scalar(value, out),
    }
}

fn write_scalar(value: &Value, out: &mut String) {
    // `Display` for a serde_json value is its compact JSON text and cannot fail.
    out.push_str(&value.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_change_the_canonical_form() {
        let a = json!({"b": [1, {"y": "é", "x": null}], "a": true});
        let b: Value =
            serde_json::from_str(r#"{ "a" : true, "b" : [ 1 , { "x" : null , "y" : "\u00e9" } ] }"#)
                .expect("json");
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":true,"b":[1,{"x":null,"y":"é"}]}"#);
    }

    #[test]
    fn sha256_hex_is_lower_case_hex_of_the_bytes() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            canonical_sha256(&json!({"b":1,"a":2})),
            sha256_hex(r#"{"a":2,"b":1}"#)
        );
    }
}
