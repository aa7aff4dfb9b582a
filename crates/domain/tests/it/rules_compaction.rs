//! Table: deterministic context compaction (MET-568), from `fixtures/rules/compaction.json`.

use metaforge_domain::compaction::{
    ChatTurn, ValueLimits, budget_history, estimate_tokens, fold_native_exchanges, truncate_observation,
    truncate_value,
};
use serde_json::{Value, json};

#[test]
fn every_compaction_case_holds() {
    let mut failures = Vec::new();
    for case in &metaforge_test_support::cases::<Value>("compaction") {
        let name = case["name"].as_str().unwrap();
        let input = &case["input"];
        let got = match input["op"].as_str().unwrap() {
            "text" => json!(truncate_observation(
                input["text"].as_str().unwrap(),
                input["max_chars"].as_u64().unwrap() as usize
            )),
            "value" => truncate_value(
                &input["value"],
                ValueLimits {
                    max_items: input["max_items"].as_u64().unwrap() as usize,
                    max_string_chars: input["max_string_chars"].as_u64().unwrap() as usize,
                },
            ),
            "history" => {
                let turns: Vec<ChatTurn> = serde_json::from_value(input["turns"].clone()).unwrap();
                serde_json::to_value(budget_history(
                    &turns,
                    input["budget_tokens"].as_u64().unwrap() as usize,
                ))
                .unwrap()
            }
            other => json!(format!("unknown op {other}")),
        };
        if got != case["expect"] {
            failures.push(format!("{name}: got {got}, expected {}", case["expect"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn tokens_are_estimated_as_chars_over_four() {
    assert_eq!(estimate_tokens(""), 0);
    assert_eq!(estimate_tokens("abcd"), 1);
    assert_eq!(estimate_tokens("abcde"), 2);
}

fn exchange(i: usize) -> Vec<Value> {
    vec![
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("c{i}"), "type": "function",
            "function": {"name": "twin.query", "arguments": format!("{{\"q\":\"part {i}\"}}")}}]}),
        json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "x".repeat(400)}),
    ]
}

#[test]
fn older_native_exchanges_fold_into_one_synopsis_and_the_newest_stays() {
    let mut messages = vec![
        json!({"role": "system", "content": "sys"}),
        json!({"role": "user", "content": "go"}),
    ];
    for i in 0..5 {
        messages.extend(exchange(i));
    }
    assert_eq!(fold_native_exchanges(&messages, 100_000), messages);
    let folded = fold_native_exchanges(&messages, 300);
    assert_eq!(folded[..2], messages[..2]);
    let synopsis = folded[2]["content"].as_str().unwrap();
    assert!(
        synopsis.starts_with("[context synopsis] 4 earlier tool exchange(s) folded:"),
        "{synopsis}"
    );
    assert!(
        synopsis.contains("called twin.query({\"q\":\"part 0\"})"),
        "{synopsis}"
    );
    assert_eq!(folded[3..], messages[messages.len() - 2..]);
    assert_eq!(
        fold_native_exchanges(&messages, 300),
        folded,
        "folding is deterministic"
    );
}

mod properties {
    use metaforge_domain::compaction::{ChatTurn, budget_history, estimate_tokens, truncate_observation};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn truncation_keeps_a_prefix_and_says_exactly_how_much_went(text in "\\PC{0,200}", max in 0usize..100) {
            let out = truncate_observation(&text, max);
            let total = text.chars().count();
            if total <= max {
                prop_assert_eq!(out, text);
            } else {
                let kept: String = text.chars().take(max).collect();
                prop_assert_eq!(out, format!("{kept}…[truncated {} chars]", total - max));
            }
        }

        #[test]
        fn history_never_splits_or_loses_a_turn_and_respects_the_budget(
            contents in prop::collection::vec("[a-z ]{0,60}", 0..12), budget in 0usize..80
        ) {
            let turns: Vec<ChatTurn> = contents
                .iter()
                .enumerate()
                .map(|(i, c)| ChatTurn { role: if i % 2 == 0 { "user".into() } else { "assistant".into() }, content: c.clone() })
                .collect();
            let h = budget_history(&turns, budget);
            prop_assert_eq!(h.folded_count + h.kept.len(), turns.len());
            prop_assert_eq!(&h.kept[..], &turns[h.folded_count..]);
            prop_assert!(h.kept.iter().map(|t| estimate_tokens(&t.content)).sum::<usize>() <= budget);
            prop_assert_eq!(h.summary.is_some(), h.folded_count > 0);
        }
    }
}
