//! The shipped templates: each parses, passes every invariant, keeps its pinned hash, and the
//! catalogue serves exactly them.

use metaforge_domain::flow::{
    DEFAULT_TEMPLATE_ID, Flow, Syntax, TemplateError, catalogue, content_hash, freeze, parse_document,
    template, template_source, validate,
};

/// Golden hashes. Cross-checked against an independent implementation (Python:
/// `json.dumps(flow, sort_keys=True, separators=(',', ':'))` → SHA-256). Changing a template
/// changes its hash: bump its `version` when you do, and update the pin here.
const GOLDEN: &[(&str, &str)] = &[
    (
        "design_v1",
        "5e807b34de78d2fab53a4cb906e9be7b1eb7baca0147de910fc3e8ef0bc5bc11",
    ),
    (
        "mech_v1",
        "fc42ec3b6c88d715278abcd7690136d08bd924ab992cb6bd342edef2515e8da5",
    ),
    (
        "hardware_v1",
        "0e36c1cde0657842f29ff20646f77ff78b9821d3b44aa40d94ff300c9ad0a487",
    ),
];

#[test]
fn shipped_templates_keep_their_golden_hashes() {
    for (id, hash) in GOLDEN {
        assert_eq!(content_hash(&template(id).unwrap()).unwrap(), *hash, "{id}");
    }
}

#[test]
fn every_template_passes_every_invariant_and_carries_version_and_label() {
    for (id, _) in GOLDEN {
        let flow = template(id).unwrap();
        assert_eq!(validate(&flow, None), vec![], "{id}");
        assert!(!flow.label.is_empty(), "{id} has a label");
        assert!(!flow.version.is_empty(), "{id} has a version");
    }
}

#[test]
fn embedded_templates_are_the_fixture_files() {
    for (id, _) in GOLDEN {
        let path = format!("{}/../../fixtures/flows/{id}.yaml", env!("CARGO_MANIFEST_DIR"));
        assert_eq!(
            std::fs::read_to_string(path).unwrap(),
            template_source(id).unwrap()
        );
    }
}

#[test]
fn templates_have_the_phases_and_gates_the_spec_names() {
    let ids = |f: &Flow| f.phases.iter().map(|p| p.id.clone()).collect::<Vec<_>>();
    let gates = |f: &Flow| {
        f.gates()
            .map(|(p, g)| (p.id.clone(), g.short_name().to_owned()))
            .collect::<Vec<_>>()
    };
    for id in ["design_v1", "mech_v1"] {
        let flow = template(id).unwrap();
        assert_eq!(
            ids(&flow),
            [
                "intent",
                "needs",
                "requirements",
                "feasibility",
                "design",
                "simulation",
                "release"
            ]
        );
        assert_eq!(
            gates(&flow),
            [
                ("feasibility".to_owned(), "G3".to_owned()),
                ("design".to_owned(), "G6".to_owned()),
                ("simulation".to_owned(), "G7".to_owned()),
                ("release".to_owned(), "G8".to_owned())
            ]
        );
        assert!(
            flow.phase("design")
                .unwrap()
                .expected_artifacts
                .contains(&"cad_model".to_owned())
        );
        // The release gate has a phase of its own: dropping simulation (the shelf story) keeps it.
        assert!(
            flow.phase("release")
                .unwrap()
                .gate
                .as_ref()
                .unwrap()
                .name
                .contains("Release")
        );
    }
    let hw = template("hardware_v1").unwrap();
    assert_eq!(
        ids(&hw),
        [
            "intent",
            "needs",
            "requirements",
            "architecture",
            "concept_selection",
            "feasibility",
            "design",
            "electronics",
            "firmware",
            "simulation",
            "manufacturing"
        ]
    );
    assert_eq!(
        hw.phase("manufacturing").unwrap().gate.as_ref().unwrap().name,
        "Release Gate G8"
    );
    assert_eq!(hw.phase("electronics").unwrap().title, "Electronics Design");
    assert_eq!(hw.phase("manufacturing").unwrap().title, "Manufacturing Prep");
}

#[test]
fn catalogue_lists_every_template_startable_with_its_summary() {
    let entries = catalogue();
    let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["design_v1", "mech_v1", "hardware_v1"]);
    for entry in &entries {
        assert!(entry.startable, "{}: {:?}", entry.id, entry.violations);
        assert!(entry.load_error.is_none());
        assert!(!entry.label.is_empty() && !entry.version.is_empty());
        assert_eq!(entry.default, entry.id == DEFAULT_TEMPLATE_ID);
        assert!(!entry.gates.is_empty() && !entry.deliverables.is_empty() && !entry.disciplines.is_empty());
    }
    let json = serde_json::to_value(&entries[0]).unwrap();
    for key in [
        "id",
        "label",
        "title",
        "version",
        "phases",
        "gates",
        "deliverables",
        "disciplines",
        "startable",
        "violations",
    ] {
        assert!(json.get(key).is_some(), "catalogue entry lacks '{key}'");
    }
}

#[test]
fn a_flow_that_breaks_an_invariant_is_listed_unstartable_not_hidden() {
    let mut flow = template("mech_v1").unwrap();
    flow.phase_mut("design").unwrap().enforce_deliverables = false;
    let entry = metaforge_domain::flow::templates::describe(&flow);
    assert!(!entry.startable);
    assert_eq!(entry.violations[0].rule, "gates-enforce-what-they-require");
    assert_eq!(entry.phases.len(), 7);
}

#[test]
fn unknown_template_is_an_error_naming_it() {
    let err = template("nope_v9").unwrap_err();
    assert_eq!(err, TemplateError::Unknown("nope_v9".to_owned()));
    assert!(err.to_string().contains("nope_v9"));
}

#[test]
fn frozen_form_omits_unset_later_fields() {
    let frozen = freeze(&template("design_v1").unwrap()).unwrap();
    for later in ["\"condition\"", "\"model\"", "\"items\""] {
        assert!(!frozen.contains(later), "{later} leaked into the frozen form");
    }
    let reparsed: Flow = parse_document(&frozen, Syntax::Json).unwrap();
    assert_eq!(reparsed, template("design_v1").unwrap());
}
