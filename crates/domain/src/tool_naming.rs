//! Tool naming: registry ids and the provider-facing names they get (one rule, used by the
//! app's tool registry and by the grounding check, so a tool is recognised under every name).
//!
//! A tool's registry id is `<server>.<tool>` (native tools carry their own dotted id, e.g.
//! `flow.list`). Providers accept only `[A-Za-z0-9_-]{1,64}` as a function name, so each id gets
//! a provider name: `mcp_<server>_<tool>` for MCP tools, the id with `.` → `_` for native ones,
//! every other character replaced by `_`. A name that would be longer than 64 characters, or that
//! is already taken by a different id, ends in `_` plus 8 hex digits of the id's hash instead, so
//! two tools never share a provider name and a long name stays recognisable.

/// The most characters a provider accepts in a tool name.
pub const MAX_PROVIDER_NAME_LEN: usize = 64;
const HASH_SUFFIX_LEN: usize = 9; // "_" + 8 hex digits

/// The registry id of an MCP tool.
pub fn mcp_tool_id(server: &str, tool: &str) -> String {
    format!("{server}.{tool}")
}

/// The provider name a tool asks for before collisions are considered.
pub fn preferred_provider_name(server: Option<&str>, tool: &str) -> String {
    let raw = match server {
        Some(server) => format!("mcp_{server}_{tool}"),
        None => tool.to_owned(),
    };
    let sanitised: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if sanitised.len() <= MAX_PROVIDER_NAME_LEN {
        sanitised
    } else {
        hashed_name(&sanitised, &raw)
    }
}

/// `base` cut short enough to carry a hash of `id`, then the hash: unique per id, ≤ 64 chars.
pub fn hashed_name(base: &str, id: &str) -> String {
    let keep = MAX_PROVIDER_NAME_LEN - HASH_SUFFIX_LEN;
    let prefix: String = base.chars().take(keep).collect();
    format!("{prefix}_{:08x}", fnv1a32(id.as_bytes()))
}

/// True when `name` is acceptable to every provider as a function name.
pub fn is_valid_provider_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PROVIDER_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// 32-bit FNV-1a: stable across builds and platforms, which a provider-facing name must be.
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, b| {
        (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// Every name the registry can give the tool with registry id `id`, the id first: the id itself,
/// its MCP provider name `mcp_<server>_<tool>` (server = the part before the first `.`), and its
/// native provider name (the id with `.` → `_`). A collision-suffixed name depends on what else is
/// registered and cannot be derived from the id alone; every other name can.
pub fn names_for_id(id: &str) -> Vec<String> {
    let mut names = vec![id.to_owned()];
    let mut push = |name: String| {
        if !names.contains(&name) {
            names.push(name);
        }
    };
    if let Some((server, tool)) = id.split_once('.')
        && !server.is_empty()
        && !tool.is_empty()
    {
        push(preferred_provider_name(Some(server), tool));
    }
    push(preferred_provider_name(None, id));
    names
}

/// True when `a` and `b` name the same tool: equal, or one is a name the registry gives the
/// other's id ([`names_for_id`]), whichever of the two is the id.
pub fn same_tool(a: &str, b: &str) -> bool {
    a == b || names_for_id(a).iter().any(|n| n == b) || names_for_id(b).iter().any(|n| n == a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn provider_names_follow_the_mcp_prefix_rule() {
        let table = [
            (Some("everything"), "get-sum", "mcp_everything_get-sum"),
            (Some("kicad"), "open.board", "mcp_kicad_open_board"),
            (Some("fs"), "read file", "mcp_fs_read_file"),
            (None, "flow.list", "flow_list"),
            (None, "search_tools", "search_tools"),
        ];
        for (server, tool, expected) in table {
            assert_eq!(preferred_provider_name(server, tool), expected);
        }
    }

    #[test]
    fn long_names_are_cut_and_hashed_to_64_chars() {
        let tool = "a".repeat(100);
        let name = preferred_provider_name(Some("srv"), &tool);
        assert_eq!(name.len(), MAX_PROVIDER_NAME_LEN);
        assert!(name.starts_with("mcp_srv_aaaa"));
        let other = preferred_provider_name(Some("srv"), &format!("{tool}b"));
        assert_ne!(name, other, "two long ids sharing a prefix must differ");
    }

    #[test]
    fn a_tool_is_known_under_its_id_and_its_provider_names() {
        assert_eq!(
            names_for_id("twin.commit_geometry"),
            [
                "twin.commit_geometry",
                "mcp_twin_commit_geometry",
                "twin_commit_geometry"
            ]
        );
        assert!(same_tool("mcp_twin_commit_geometry", "twin.commit_geometry"));
        assert!(same_tool("twin.commit_geometry", "mcp_twin_commit_geometry"));
        assert!(!same_tool("mcp_twin_get_node", "twin.commit_geometry"));
        assert_eq!(names_for_id("search_tools"), ["search_tools"]);
    }

    proptest! {
        #[test]
        fn any_tool_name_yields_a_valid_provider_name(server in "[a-z0-9_-]{1,32}", tool in ".{1,200}") {
            let name = preferred_provider_name(Some(&server), &tool);
            prop_assert!(is_valid_provider_name(&name), "{name}");
            let hashed = hashed_name(&name, &mcp_tool_id(&server, &tool));
            prop_assert!(is_valid_provider_name(&hashed), "{hashed}");
        }
    }
}
