//! The prose diff of a flow against its template, read by the person deciding whether to
//! approve it. One line per change; relaxations are shouted in capitals (`phase 'simulation'
//! DROPPED`, `phase 'x' NO LONGER requires 'y'`, `gate 'G6' NO LONGER enforces its
//! deliverables`), because loosening is the change most worth attention and easiest to lose.

use super::model::{Flow, Gate, Phase};

/// The shouted words that mark a line of [`prose_diff`] as a relaxation.
const RELAXATION_MARKERS: &[&str] = &[
    " DROPPED",
    " NO LONGER ",
    " NOW CONDITIONAL ",
    " REMOVED ",
    " IS NOW AUTO-APPROVED",
];

/// Whether a line of [`prose_diff`] loosens the flow (the lines it shouts), so a reviewer's
/// screen can mark exactly those.
pub fn is_relaxation(line: &str) -> bool {
    RELAXATION_MARKERS.iter().any(|marker| line.contains(marker))
}

/// The prose lines describing how `flow` differs from `base`; empty when they are the same.
pub fn prose_diff(base: &Flow, flow: &Flow) -> Vec<String> {
    let mut lines = Vec::new();
    if base.id != flow.id {
        lines.push(format!("flow id changed from '{}' to '{}'", base.id, flow.id));
    }
    if base.version != flow.version {
        lines.push(format!(
            "version changed from '{}' to '{}'",
            base.version, flow.version
        ));
    }
    if base.title != flow.title {
        lines.push(format!("title changed from '{}' to '{}'", base.title, flow.title));
    }
    if base.label != flow.label {
        lines.push(format!("label changed from '{}' to '{}'", base.label, flow.label));
    }
    for old in &base.phases {
        match flow.phase(&old.id) {
            None => lines.push(format!("phase '{}' DROPPED", old.id)),
            Some(new) => phase_changes(old, new, &mut lines),
        }
    }
    for (index, new) in flow.phases.iter().enumerate() {
        if base.phase(&new.id).is_some() {
            continue;
        }
        let place = match flow.phases.get(index + 1) {
            Some(next) => format!(" before '{}'", next.id),
            None => " at the end".to_owned(),
        };
        let gate = match &new.gate {
            Some(g) if g.is_human() => format!(" with human gate '{}'", g.name),
            Some(g) => format!(" with auto-approved gate '{}'", g.name),
            None => String::new(),
        };
        lines.push(format!("phase '{}' added{place}{gate}", new.id));
        if !new.depends_on.is_empty() {
            lines.push(format!(
                "phase '{}' depends on {}",
                new.id,
                quoted_list(&new.depends_on)
            ));
        }
        for wanted in &new.required_deliverables {
            lines.push(format!("phase '{}' now requires '{wanted}'", new.id));
        }
    }
    let old_order: Vec<&str> = base
        .phases
        .iter()
        .filter(|p| flow.phase(&p.id).is_some())
        .map(|p| p.id.as_str())
        .collect();
    let new_order: Vec<&str> = flow
        .phases
        .iter()
        .filter(|p| base.phase(&p.id).is_some())
        .map(|p| p.id.as_str())
        .collect();
    if old_order != new_order {
        lines.push(format!("phases reordered: {}", new_order.join(", ")));
    }
    lines
}

fn quoted_list(items: &[String]) -> String {
    if items.is_empty() {
        return "nothing".to_owned();
    }
    items
        .iter()
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn phase_changes(old: &Phase, new: &Phase, lines: &mut Vec<String>) {
    let id = &old.id;
    if old.title != new.title {
        lines.push(format!(
            "phase '{id}' retitled from '{}' to '{}'",
            old.title, new.title
        ));
    }
    for wanted in &new.required_deliverables {
        if !old.required_deliverables.contains(wanted) {
            lines.push(format!("phase '{id}' now requires '{wanted}'"));
        }
    }
    for wanted in &old.required_deliverables {
        if !new.required_deliverables.contains(wanted) {
            lines.push(format!("phase '{id}' NO LONGER requires '{wanted}'"));
        }
    }
    for made in &new.expected_artifacts {
        if !old.expected_artifacts.contains(made) {
            lines.push(format!("phase '{id}' now produces '{made}'"));
        }
    }
    for made in &old.expected_artifacts {
        if !new.expected_artifacts.contains(made) {
            lines.push(format!("phase '{id}' NO LONGER produces '{made}'"));
        }
    }
    match (&old.condition, &new.condition) {
        (None, Some(c)) => lines.push(format!("phase '{id}' is NOW CONDITIONAL on '{c}'")),
        (Some(_), None) => lines.push(format!("phase '{id}' is now unconditional")),
        (Some(a), Some(b)) if a != b => {
            lines.push(format!("phase '{id}' condition changed from '{a}' to '{b}'"));
        }
        _ => {}
    }
    if old.disciplines != new.disciplines {
        lines.push(format!(
            "phase '{id}' disciplines changed from {} to {}",
            quoted_list(&old.disciplines),
            quoted_list(&new.disciplines)
        ));
    }
    if old.depends_on != new.depends_on {
        lines.push(format!(
            "phase '{id}' now depends on {} (was {})",
            quoted_list(&new.depends_on),
            quoted_list(&old.depends_on)
        ));
    }
    match (&old.model, &new.model) {
        (a, Some(m)) if a.as_ref() != Some(m) => lines.push(format!("phase '{id}' model set to '{m}'")),
        (Some(m), None) => lines.push(format!("phase '{id}' model '{m}' unpinned")),
        _ => {}
    }
    for item in &new.items {
        if !old.items.contains(item) {
            lines.push(format!("phase '{id}' declares item '{item}'"));
        }
    }
    for item in &old.items {
        if !new.items.contains(item) {
            lines.push(format!("phase '{id}' NO LONGER declares item '{item}'"));
        }
    }
    gate_changes(id, old, new, lines);
}

fn gate_changes(id: &str, old: &Phase, new: &Phase, lines: &mut Vec<String>) {
    match (&old.gate, &new.gate) {
        (None, None) => {
            if old.enforce_deliverables != new.enforce_deliverables {
                lines.push(enforcement_line(
                    &format!("phase '{id}'"),
                    new.enforce_deliverables,
                ));
            }
        }
        (Some(g), None) => lines.push(format!("gate '{}' REMOVED from phase '{id}'", g.short_name())),
        (None, Some(g)) => {
            lines.push(format!("phase '{id}' gains gate '{}'", g.name));
            if !new.enforce_deliverables {
                lines.push(enforcement_line(&format!("gate '{}'", g.short_name()), false));
            }
        }
        (Some(a), Some(b)) => {
            let name = format!("gate '{}'", a.short_name());
            if old.enforce_deliverables != new.enforce_deliverables {
                lines.push(enforcement_line(&name, new.enforce_deliverables));
            }
            existing_gate_changes(&name, a, b, lines);
        }
    }
}

fn enforcement_line(subject: &str, enforces: bool) -> String {
    if enforces {
        format!("{subject} now enforces its deliverables")
    } else {
        format!("{subject} NO LONGER enforces its deliverables")
    }
}

fn existing_gate_changes(name: &str, a: &Gate, b: &Gate, lines: &mut Vec<String>) {
    if a.name != b.name {
        lines.push(format!("{name} renamed to '{}'", b.name));
    }
    if a.auto_approve != b.auto_approve {
        lines.push(if b.auto_approve {
            format!("{name} IS NOW AUTO-APPROVED: NO HUMAN answers it")
        } else {
            format!("{name} now needs a human decision")
        });
    }
    for c in &b.criteria {
        if !a.criteria.contains(c) {
            lines.push(format!("{name} now checks '{c}'"));
        }
    }
    for c in &a.criteria {
        if !b.criteria.contains(c) {
            lines.push(format!("{name} NO LONGER checks '{c}'"));
        }
    }
}
