//! Properties of the twin content hash every engine relies on to agree: it depends on the
//! content, never on the order properties were inserted in.

use metaforge_ports::{TwinNodeType, canonical_json, twin_content_hash};
use proptest::prelude::*;
use serde_json::{Map, Value};

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        "[a-z\\\\\"é ]{0,8}".prop_map(Value::from),
        Just(Value::Null),
    ]
}

proptest! {
    #[test]
    fn property_order_never_changes_the_hash_or_canonical_form(
        entries in proptest::collection::btree_map("[a-zA-Z_]{1,6}", scalar(), 0..8)
    ) {
        let forward: Map<String, Value> = entries.clone().into_iter().collect();
        let backward: Map<String, Value> = entries.into_iter().rev().collect();
        prop_assert_eq!(canonical_json(&Value::Object(forward.clone())), canonical_json(&Value::Object(backward.clone())));
        prop_assert_eq!(twin_content_hash(TwinNodeType::WorkProduct, &forward), twin_content_hash(TwinNodeType::WorkProduct, &backward));
        let parsed: Value = serde_json::from_str(&canonical_json(&Value::Object(forward.clone()))).unwrap();
        prop_assert_eq!(parsed, Value::Object(forward.clone()), "canonical JSON is valid JSON of the same value");
        prop_assert_ne!(twin_content_hash(TwinNodeType::WorkProduct, &forward), twin_content_hash(TwinNodeType::Component, &forward), "the type is part of the content");
    }
}
