//! Tool-name globs for per-server include/exclude filters.
//!
//! Only `*` (any run, possibly empty) and `?` (exactly one character) are special: tool names are
//! plain identifiers, so a full glob engine would add a dependency and nothing a filter needs.

/// True when `name` matches `pattern`.
pub(crate) fn glob_matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0usize, 0usize);
    // Position of the last `*` seen and the name index it was tried at, for backtracking.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((star_p, star_n)) => {
                    p = star_p + 1;
                    n = star_n + 1;
                    star = Some((star_p, star_n + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// The filter rule: included when `include` is empty or any include glob matches, and no
/// exclude glob matches. Exclude wins, so an operator can carve a tool out of a broad include.
pub(crate) fn tool_passes(include: &[String], exclude: &[String], name: &str) -> bool {
    let included = include.is_empty() || include.iter().any(|g| glob_matches(g, name));
    included && !exclude.iter().any(|g| glob_matches(g, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_shell_patterns_on_tool_names() {
        let table = [
            ("*", "anything", true),
            ("*", "", true),
            ("echo", "echo", true),
            ("echo", "echoes", false),
            ("get-*", "get-sum", true),
            ("get-*", "toggle", false),
            ("*-sum", "get-sum", true),
            ("g?t-sum", "get-sum", true),
            ("g?t-sum", "gt-sum", false),
            ("*a*b*", "xxaxxbxx", true),
            ("*a*b*", "xxbxxaxx", false),
            ("trigger-*-request", "trigger-sampling-request", true),
            ("trigger-*-request", "trigger-sampling-request-async", false),
        ];
        for (pattern, name, expected) in table {
            assert_eq!(glob_matches(pattern, name), expected, "{pattern} vs {name}");
        }
    }

    #[test]
    fn exclude_wins_over_include_and_empty_include_means_all() {
        let inc = vec!["get-*".to_owned()];
        let exc = vec!["get-env".to_owned()];
        assert!(tool_passes(&inc, &exc, "get-sum"));
        assert!(!tool_passes(&inc, &exc, "get-env"));
        assert!(!tool_passes(&inc, &exc, "echo"));
        assert!(tool_passes(&[], &exc, "echo"));
        assert!(!tool_passes(&[], &exc, "get-env"));
    }
}
