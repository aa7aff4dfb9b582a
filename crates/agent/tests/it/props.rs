//! Invariant: whatever the tools' timings, a native batch's results come back in the model's
//! call order, one result per call.

use std::time::Duration;

use metaforge_agent::{CancellationToken, TurnConfig, TurnInput};
use metaforge_test_support::doubles::{FakeToolSource, ScriptStep, descriptor};
use proptest::prelude::*;
use serde_json::json;

use crate::common::{RigSpec, events, rig};
use crate::native::last_results;

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    #[test]
    fn batch_results_always_come_back_in_call_order(delays in proptest::collection::vec(0u64..15, 1..6)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
        let order = runtime.block_on(async {
            let mut server = FakeToolSource::new("cad");
            for (i, ms) in delays.iter().enumerate() {
                server = server.with_echo(descriptor(&format!("t{i}"), json!({"type": "object"}), true), Duration::from_millis(*ms));
            }
            let calls: Vec<(String, String, serde_json::Value)> = (0..delays.len())
                .map(|i| (format!("call{i}"), format!("mcp_cad_t{i}"), json!({"i": i})))
                .collect();
            let borrowed: Vec<(&str, &str, serde_json::Value)> =
                calls.iter().map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone())).collect();
            let rig = rig(RigSpec::new(vec![ScriptStep::calls(&borrowed), ScriptStep::text("ok")], server)).await;
            let (sink, _rx) = events();
            rig.agent
                .run_turn(&TurnConfig::chat("p"), &TurnInput { user: "go".to_owned(), ..TurnInput::default() }, &sink, &CancellationToken::new())
                .await
                .expect("turn");
            last_results(&rig.llm.requests()[1]).into_iter().map(|r| r.0).collect::<Vec<_>>()
        });
        let expected: Vec<String> = (0..delays.len()).map(|i| format!("call{i}")).collect();
        prop_assert_eq!(order, expected);
    }
}
