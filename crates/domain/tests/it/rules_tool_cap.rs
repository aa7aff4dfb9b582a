//! Table + properties: the provider tool-array cap (FORGE-94/518), from `fixtures/rules/tool_cap.json`.

#![expect(
    clippy::unwrap_used,
    reason = "fixture helpers: a malformed fixture must fail the test loudly"
)]

use std::collections::BTreeSet;

use metaforge_domain::providers::{max_tools_for, resolve_provider};
use metaforge_domain::tool_cap::{
    COMPANION_GROUPS, OfferedTool, ToolOrigin, companion_group_of, select_tools,
};
use proptest::prelude::*;
use serde_json::Value;

fn table() -> Vec<Value> {
    metaforge_test_support::cases("tool_cap")
}

#[test]
fn every_tool_cap_case_holds() {
    let mut failures = Vec::new();
    for case in table() {
        let name = case["name"].as_str().unwrap();
        let tools: Vec<OfferedTool> = serde_json::from_value(case["tools"].clone()).unwrap();
        let pinned: BTreeSet<String> =
            serde_json::from_value(case.get("pinned").cloned().unwrap_or(Value::Array(vec![]))).unwrap();
        let cap = case
            .get("max_tools")
            .and_then(Value::as_u64)
            .map(|c| c as usize)
            .or_else(|| max_tools_for(resolve_provider(case["provider"].as_str().unwrap()).unwrap()));
        let got = serde_json::to_value(select_tools(&tools, cap, &pinned)).unwrap();
        for (key, want) in case["expect"].as_object().unwrap() {
            let ok = match key.as_str() {
                "kept_count" => got["kept"].as_array().unwrap().len() as u64 == want.as_u64().unwrap(),
                "kept_includes" | "dropped_includes" => {
                    let list = &got[key.trim_end_matches("_includes")];
                    want.as_array()
                        .unwrap()
                        .iter()
                        .all(|n| list.as_array().unwrap().contains(n))
                }
                _ => &got[key] == want,
            };
            if !ok {
                failures.push(format!("{name}: {key} expected {want}, got {got}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn arb_tools() -> impl Strategy<Value = Vec<OfferedTool>> {
    let names = prop::sample::select(vec![
        "freecad.import_step",
        "freecad.export_model",
        "freecad.open_session",
        "freecad.close_session",
        "freecad.describe_step_file",
        "twin.stage_work_product_file",
        "twin.commit_geometry",
        "cad.pad_sketch",
        "kicad_open_session",
        "gazebo.spawn",
        "twin.query",
        "web.get",
        "kicad.erc",
        "kicad.drc",
        "spice.run",
        "isaac_sim.step",
        "chat.set_project_scope",
        "search_tools",
        "sim.a",
        "sim.b",
        "sim.c",
        "sim.d",
    ]);
    let origins = prop::sample::select(vec![
        "native",
        "mcp:freecad",
        "mcp:twin",
        "mcp:kicad",
        "mcp:gazebo",
        "mcp:web",
    ]);
    prop::collection::btree_map(names, origins, 0..22).prop_map(|m| {
        m.into_iter()
            .map(|(n, o)| OfferedTool {
                name: n.to_owned(),
                origin: ToolOrigin::parse(o).unwrap(),
                input_schema: None,
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn selection_always_holds_the_cap_keeps_natives_first_and_never_splits_a_group(
        tools in arb_tools(), cap in 0usize..12, pin_first in any::<bool>()
    ) {
        let pinned: BTreeSet<String> = if pin_first { tools.first().map(|t| t.name.clone()).into_iter().collect() } else { BTreeSet::new() };
        let sel = select_tools(&tools, Some(cap), &pinned);
        prop_assert_eq!(sel.kept.len() + sel.dropped.len(), tools.len());
        // A request over the cap is one the provider rejects: the cap holds whatever is protected.
        prop_assert!(sel.kept.len() <= cap, "{} kept over a cap of {cap}", sel.kept.len());
        // Natives come first: while a native that stands alone (no companion group to keep
        // whole) is dropped, everything kept is a native or kept whole with one (its group).
        let lone_native_dropped = tools.iter().any(|t| {
            t.origin == ToolOrigin::Native && companion_group_of(&t.name).is_none() && sel.dropped.contains(&t.name)
        });
        if lone_native_dropped {
            let native_groups: BTreeSet<usize> = tools
                .iter()
                .filter(|t| t.origin == ToolOrigin::Native && sel.kept.contains(&t.name))
                .filter_map(|t| companion_group_of(&t.name))
                .collect();
            for t in tools.iter().filter(|t| sel.kept.contains(&t.name)) {
                prop_assert!(
                    t.origin == ToolOrigin::Native
                        || companion_group_of(&t.name).is_some_and(|g| native_groups.contains(&g)),
                    "{} kept before a native: {:?}", t.name, sel
                );
            }
        }
        if !sel.protected_exceeds_cap {
            for t in &tools {
                if t.origin == ToolOrigin::Native || pinned.contains(&t.name) {
                    prop_assert!(sel.kept.contains(&t.name), "{} dropped", t.name);
                }
            }
        }
        for g in 0..COMPANION_GROUPS.len() {
            let members: Vec<&OfferedTool> = tools.iter().filter(|t| companion_group_of(&t.name) == Some(g)).collect();
            let kept = members.iter().filter(|t| sel.kept.contains(&t.name)).count();
            prop_assert!(kept == 0 || kept == members.len(), "group {} split: {:?}", g, sel);
        }
    }
}
