//! The native `search_tools`: a keyword search over the full catalogue of every connected
//! server, whatever the turn's scope, so a scoped turn can still reach what scoping hid.
//!
//! "Registered isn't the same as in the schema" (FORGE-94): a match the turn could not see is
//! registered onto the live registry for the caller's session (callable on the very next step),
//! one it already saw is reported "already available" — and both are pinned, so the provider's
//! tool cap (applied by the agent loop from `ToolBox::pinned`) cannot drop a tool the search
//! promised.

use metaforge_ports::{ToolDescriptor, ToolHints};
use serde_json::json;

/// The native id (and provider name) of the search tool.
pub const SEARCH_TOOLS_ID: &str = "search_tools";
/// Matches returned when the call names no `limit`.
pub const DEFAULT_SEARCH_LIMIT: usize = 10;
/// Most matches one call returns.
pub const MAX_SEARCH_LIMIT: usize = 50;

/// The search tool as the model sees it (read-only: it runs without a hold for every caller).
pub fn search_tools_descriptor() -> ToolDescriptor {
    ToolDescriptor {
        name: SEARCH_TOOLS_ID.to_owned(),
        title: Some("Search tools".to_owned()),
        description: "Search every configured tool server by keyword and make the matches callable \
                      from your next step. Tools already available are reported as such."
            .to_owned(),
        input_schema: json!({
            "type": "object",
            "required": ["query"],
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "keywords, e.g. 'pcb drill'"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT,
                          "description": "most matches to return (default 10, max 50)"}
            }
        }),
        hints: ToolHints {
            read_only_hint: Some(true),
            destructive_hint: Some(false),
            ..ToolHints::default()
        },
    }
}

/// The keywords of `query`: alphanumeric runs, lower-cased.
pub(crate) fn keywords(query: &str) -> Vec<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// How well a tool matches: `None` unless its id or description holds every keyword; more
/// keywords in the id rank higher.
pub(crate) fn score(words: &[String], id: &str, description: &str) -> Option<usize> {
    if words.is_empty() {
        return None;
    }
    let id = id.to_lowercase();
    let haystack = format!("{id} {}", description.to_lowercase());
    words
        .iter()
        .all(|w| haystack.contains(w.as_str()))
        .then(|| words.iter().filter(|w| id.contains(w.as_str())).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_keyword_must_match_and_id_hits_rank_higher() {
        let words = keywords("Kicad, DRC!");
        assert_eq!(words, ["kicad", "drc"]);
        assert_eq!(score(&words, "kicad.run_drc", "design rules"), Some(2));
        assert_eq!(score(&words, "kicad.check", "runs the drc"), Some(1));
        assert_eq!(score(&words, "spice.simulate", "drc"), None);
        assert_eq!(score(&keywords("  "), "kicad.run_drc", ""), None);
    }
}
