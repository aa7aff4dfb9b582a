//! The shipped templates: each parses, passes every invariant, and keeps its pinned hash.

use metaforge_domain::flow::{
    DEFAULT_TEMPLATE_ID, Syntax, catalogue, content_hash, parse_document, template, template_source, validate,
};
use metaforge_domain::flow::{DocumentError, Flow};

const IDS: &[&str] = &["design_v1", "mech_v1", "hardware_v1"];

#[test]
fn every_template_passes_every_invariant() {
    for id in IDS {
        let flow = template(id).unwrap();
        assert_eq!(validate(&flow, None), vec![], "{id}");
        assert!(!flow.label.is_empty(), "{id} has a label");
        assert!(!flow.version.is_empty(), "{id} has a version");
    }
}

#[test]
fn scratch_errors() {
    let e = parse_document::<Flow>("id: x\nversion: 1\ntitle: t\nphases:\n  - id: a\n    titel: b\n", Syntax::Yaml);
    eprintln!("{e:?}");
    let e = parse_document::<Flow>("id: [x\n", Syntax::Yaml);
    eprintln!("{e:?}");
    let e = parse_document::<Flow>("{\"id\": 1}", Syntax::Json);
    eprintln!("{e:?}");
    let _: Option<DocumentError> = None;
    eprintln!("{}", serde_json::to_string_pretty(&catalogue()).unwrap());
    let _ = (DEFAULT_TEMPLATE_ID, template_source("x"), content_hash(&template("mech_v1").unwrap()));
}
