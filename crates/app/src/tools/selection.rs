//! Which registered tools' schemas go to the provider when its tools array is capped.
//!
//! The seed's rule ("Provider tool-array cap", FORGE-94, FORGE-518): not a tail slice. Every
//! native tool is kept; then every protected tool (pinned by `search_tools`, any `*_open_session`,
//! the session-critical verbs); companion groups are kept whole; the rest of the budget is filled
//! round-robin across MCP servers so no adapter vanishes wholesale, with the niche families
//! served last. The drop is never silent: the caller logs `tool_schemas_truncated`.

use std::collections::{BTreeMap, BTreeSet};

/// Tool-name endings that are structural for their adapter's other tools (FORGE-94).
pub const SESSION_CRITICAL_SUFFIXES: &[&str] = &[
    "_open_session",
    "pad_sketch",
    "pocket_sketch",
    "revolve_sketch",
    "loft_sketches",
    "sweep_sketch",
    "list_joints",
];

/// Servers that only get what the other adapters leave over.
pub const NICHE_SERVERS: &[&str] = &["gazebo", "isaac_sim", "omniverse_usd"];

/// Groups whose round trips the cap must never split (FORGE-518), by registry id.
pub const COMPANION_GROUPS: &[&[&str]] = &[&[
    "twin.stage_work_product_file",
    "freecad.import_step",
    "freecad.export_model",
    "twin.commit_geometry",
    "freecad.open_session",
    "freecad.close_session",
    "twin.describe_step_file",
]];

/// One candidate for the outgoing tools array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Registry id (`server.tool`, or the native id).
    pub id: String,
    /// The MCP server, `None` for native tools.
    pub server: Option<String>,
    /// `search_tools` promised this tool to the model.
    pub pinned: bool,
}

/// What survived the cap, in the candidates' order, and what did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Ids kept.
    pub kept: Vec<String>,
    /// Ids dropped, sorted.
    pub dropped: Vec<String>,
}

fn is_protected(c: &Candidate) -> bool {
    c.server.is_none()
        || c.pinned
        || SESSION_CRITICAL_SUFFIXES
            .iter()
            .any(|suffix| c.id.ends_with(suffix) || c.id.ends_with(&suffix.replace('_', ".")))
}

/// Chooses at most `cap` candidates (all of them when `cap` is `None` or not exceeded).
pub fn select_under_cap(candidates: &[Candidate], cap: Option<usize>) -> Selection {
    let Some(cap) = cap.filter(|cap| candidates.len() > *cap) else {
        return Selection {
            kept: candidates.iter().map(|c| c.id.clone()).collect(),
            dropped: Vec::new(),
        };
    };
    let known: BTreeSet<&str> = candidates.iter().map(|c| c.id.as_str()).collect();
    let mut kept: BTreeSet<String> = BTreeSet::new();
    let take = |id: &str, kept: &mut BTreeSet<String>| {
        if kept.len() < cap || kept.contains(id) {
            kept.insert(id.to_owned());
        }
    };
    // Natives first, then the other protected classes.
    for c in candidates.iter().filter(|c| c.server.is_none()) {
        take(&c.id, &mut kept);
    }
    for c in candidates.iter().filter(|c| is_protected(c)) {
        take(&c.id, &mut kept);
    }
    close_companions(&known, &mut kept, cap);
    // Round-robin across servers, niche servers after everyone else.
    let mut per_server: BTreeMap<(bool, String), Vec<&str>> = BTreeMap::new();
    for c in candidates {
        if let Some(server) = c.server.as_ref().filter(|_| !kept.contains(&c.id)) {
            let niche = NICHE_SERVERS.contains(&server.as_str());
            per_server
                .entry((niche, server.clone()))
                .or_default()
                .push(c.id.as_str());
        }
    }
    for niche_pass in [false, true] {
        let mut queues: Vec<std::collections::VecDeque<&str>> = per_server
            .iter()
            .filter(|((niche, _), _)| *niche == niche_pass)
            .map(|(_, ids)| ids.iter().copied().collect())
            .collect();
        while kept.len() < cap && queues.iter().any(|q| !q.is_empty()) {
            for queue in &mut queues {
                if kept.len() >= cap {
                    break;
                }
                if let Some(id) = queue.pop_front() {
                    kept.insert(id.to_owned());
                    close_companions(&known, &mut kept, cap);
                }
            }
        }
    }
    let kept_in_order: Vec<String> = candidates
        .iter()
        .filter(|c| kept.contains(&c.id))
        .map(|c| c.id.clone())
        .collect();
    let mut dropped: Vec<String> = candidates
        .iter()
        .filter(|c| !kept.contains(&c.id))
        .map(|c| c.id.clone())
        .collect();
    dropped.sort();
    Selection {
        kept: kept_in_order,
        dropped,
    }
}

/// Adds the rest of any companion group a kept tool belongs to, while the cap allows.
fn close_companions(known: &BTreeSet<&str>, kept: &mut BTreeSet<String>, cap: usize) {
    for group in COMPANION_GROUPS {
        if group.iter().any(|id| kept.contains(*id)) {
            for id in group.iter().filter(|id| known.contains(**id)) {
                if kept.len() < cap || kept.contains(*id) {
                    kept.insert((*id).to_owned());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mcp(server: &str, tool: &str) -> Candidate {
        Candidate {
            id: format!("{server}.{tool}"),
            server: Some(server.to_owned()),
            pinned: false,
        }
    }
    fn native(id: &str) -> Candidate {
        Candidate {
            id: id.to_owned(),
            server: None,
            pinned: false,
        }
    }

    #[test]
    fn under_the_cap_everything_is_kept() {
        let c = vec![native("a"), mcp("s", "b")];
        let s = select_under_cap(&c, Some(128));
        assert_eq!(s.kept, vec!["a".to_owned(), "s.b".to_owned()]);
        assert!(s.dropped.is_empty());
        assert_eq!(select_under_cap(&c, None).kept.len(), 2);
    }

    #[test]
    fn round_robin_gives_each_server_a_share_and_niche_servers_go_last() {
        let mut c = vec![native("search_tools")];
        for server in ["alpha", "beta", "gazebo"] {
            for i in 0..10 {
                c.push(mcp(server, &format!("t{i:02}")));
            }
        }
        let s = select_under_cap(&c, Some(11));
        let count = |srv: &str| s.kept.iter().filter(|id| id.starts_with(srv)).count();
        assert_eq!(count("alpha"), 5);
        assert_eq!(count("beta"), 5);
        assert_eq!(count("gazebo"), 0);
        assert!(s.kept.contains(&"search_tools".to_owned()));
        assert_eq!(s.dropped.len(), 20);
    }

    #[test]
    fn pinned_open_session_and_session_verbs_survive_an_alphabetical_tail() {
        let mut c: Vec<Candidate> = (0..50).map(|i| mcp("cad", &format!("a{i:02}"))).collect();
        c.push(mcp("cad", "zz_open_session"));
        c.push(mcp("cad", "zz_pad_sketch"));
        let mut pinned = mcp("cad", "zzz_pinned");
        pinned.pinned = true;
        c.push(pinned);
        let s = select_under_cap(&c, Some(10));
        for id in ["cad.zz_open_session", "cad.zz_pad_sketch", "cad.zzz_pinned"] {
            assert!(s.kept.contains(&id.to_owned()), "{id} dropped");
        }
        assert_eq!(s.kept.len(), 10);
    }

    #[test]
    fn a_companion_group_is_never_split() {
        let mut c: Vec<Candidate> = (0..30).map(|i| mcp("aaa", &format!("t{i:02}"))).collect();
        c.push(mcp("twin", "commit_geometry"));
        c.push(mcp("twin", "stage_work_product_file"));
        c.push(mcp("freecad", "export_model"));
        c.push(mcp("freecad", "import_step"));
        let s = select_under_cap(&c, Some(8));
        let group: Vec<bool> = [
            "twin.commit_geometry",
            "twin.stage_work_product_file",
            "freecad.export_model",
            "freecad.import_step",
        ]
        .iter()
        .map(|id| s.kept.contains(&(*id).to_owned()))
        .collect();
        assert!(group.iter().all(|k| *k) || group.iter().all(|k| !*k), "{group:?}");
        assert!(s.kept.len() <= 8);
    }

    proptest! {
        #[test]
        fn never_exceeds_the_cap_keeps_natives_and_partitions_the_input(
            natives in 0usize..5, servers in 1usize..6, per in 0usize..40, cap in 5usize..130
        ) {
            let mut c: Vec<Candidate> = (0..natives).map(|i| native(&format!("n{i}"))).collect();
            for s in 0..servers {
                for t in 0..per {
                    c.push(mcp(&format!("s{s}"), &format!("t{t}")));
                }
            }
            let sel = select_under_cap(&c, Some(cap));
            prop_assert!(sel.kept.len() <= cap.max(natives));
            prop_assert_eq!(sel.kept.len() + sel.dropped.len(), c.len());
            for i in 0..natives {
                let id = format!("n{i}");
                prop_assert!(sel.kept.contains(&id));
            }
            if c.len() > cap {
                prop_assert_eq!(sel.kept.len(), cap);
            }
        }
    }
}
