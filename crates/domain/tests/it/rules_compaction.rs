//! Table: deterministic context compaction (MET-568), from `fixtures/rules/compaction.json`.

use metaforge_domain::compaction::{
    ChatTurn, SUMMARY_MAX_CHARS, ValueLimits, budget_history, estimate_tokens, fold_native_exchanges,
    summarize_turns, truncate_observation, truncate_value,
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
        synopsis.starts_with(
            "[context synopsis] 4 earlier tool exchange(s) folded (8 message(s), 0 failed tool result(s)):"
        ),
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

#[test]
fn a_long_conversation_summary_is_capped_and_keeps_its_first_and_last_turns() {
    let turns: Vec<ChatTurn> = (0..100)
        .map(|i| ChatTurn {
            role: "user".into(),
            content: format!("fact {i}: {}", "y".repeat(220)),
        })
        .collect();
    let history = budget_history(&turns, 60);
    let summary = history.summary.clone().unwrap();
    assert_eq!(history.folded_count, 99);
    assert!(
        summary.chars().count() <= SUMMARY_MAX_CHARS,
        "{} chars",
        summary.len()
    );
    assert!(summary.starts_with("Summary of 99 earlier message(s):\n- user: fact 0: "));
    assert!(
        summary.contains("\n- user: fact 98: "),
        "the latest folded turn stays"
    );
    let omitted = summary
        .lines()
        .filter(|l| l.contains("omitted from this summary"))
        .count();
    let listed = summary.lines().filter(|l| l.starts_with("- user: fact")).count();
    assert_eq!(omitted, 1, "{summary}");
    let said: usize = summary
        .split("- … ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(said + listed, 99, "the omitted count is exact");
    assert_eq!(budget_history(&turns, 60), history, "deterministic");
}

#[test]
fn a_short_summary_is_not_cut() {
    let turns: Vec<ChatTurn> = (0..3)
        .map(|i| ChatTurn {
            role: "assistant".into(),
            content: format!("note {i}"),
        })
        .collect();
    assert_eq!(
        summarize_turns(&turns),
        "Summary of 3 earlier message(s):\n- assistant: note 0\n- assistant: note 1\n- assistant: note 2"
    );
}

#[test]
fn the_synopsis_counts_the_folded_messages_and_the_failed_results() {
    let mut messages = vec![json!({"role": "user", "content": "go"})];
    for i in 0..4 {
        messages.extend(exchange(i));
    }
    messages[2]["error_count"] = json!(2);
    messages[4]["is_error"] = json!(true);
    messages[6]["error_count"] = json!(0);
    let folded = fold_native_exchanges(&messages, 300);
    let synopsis = folded[1]["content"].as_str().unwrap();
    assert!(
        synopsis.starts_with(
            "[context synopsis] 3 earlier tool exchange(s) folded (6 message(s), 3 failed tool result(s)):"
        ),
        "{synopsis}"
    );
    assert_eq!(synopsis.matches("→ error:").count(), 2, "{synopsis}");
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
            prop_assert_eq!(h.kept.is_empty(), turns.is_empty(), "the newest turn is never folded");
            if h.truncated_chars == 0 {
                prop_assert_eq!(&h.kept[..], &turns[h.folded_count..]);
                prop_assert!(h.kept.iter().map(|t| estimate_tokens(&t.content)).sum::<usize>() <= budget);
            } else {
                let newest = &turns[turns.len() - 1];
                let kept = &h.kept[0].content;
                let cut = newest.content.chars().count() - h.truncated_chars;
                let prefix: String = newest.content.chars().take(cut).collect();
                prop_assert_eq!(h.kept.len(), 1);
                prop_assert_eq!(kept, &format!("{prefix}…[truncated {} chars]", h.truncated_chars));
                prop_assert!(estimate_tokens(kept) <= budget || cut == 0, "cut to fit unless only the marker is left");
            }
            prop_assert_eq!(h.summary.is_some(), h.folded_count > 0);
        }
    }
}
