//! KiCad's DRC report (`pcbnew.WriteDRCReport`, millimetres) read into violations, and the
//! project's exclusions applied to them: KiCad 6's scripting report lists every violation, and a
//! person's exclusions live in the project file (`board.design_settings.drc_exclusions`, each
//! `type|x_nm|y_nm|uuid|uuid`), so an excluded violation is reported as such, never dropped.

use serde::Serialize;
use serde_json::Value;

/// Where a violation is and what is there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Place {
    /// x (mm).
    pub x_mm: f64,
    /// y (mm).
    pub y_mm: f64,
    /// The item, as KiCad describes it (`Track [GND] on F.Cu, length 3.2 mm`).
    pub item: String,
}

/// Which list of the report a violation is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    /// A design-rule violation.
    Violation,
    /// A missing connection.
    Unconnected,
    /// A footprint that differs from its library or schematic.
    Footprint,
}

/// One violation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DrcViolation {
    /// The list it is in.
    pub section: Section,
    /// KiCad's code (`clearance`, `silk_over_copper`, `unconnected_items`).
    pub kind: String,
    /// KiCad's words.
    pub description: String,
    /// `error` or `warning` (as the board's severities set it).
    pub severity: String,
    /// The rule that caught it, when the report names one.
    pub rule: Option<String>,
    /// Its items, the first where KiCad puts the marker.
    pub places: Vec<Place>,
    /// A person excluded it in the project (it is listed, not counted).
    pub excluded: bool,
}

/// The report's header counts, as KiCad printed them (`** Found N DRC violations **`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Design-rule violations.
    pub violations: usize,
    /// Unconnected items.
    pub unconnected: usize,
    /// Footprint errors.
    pub footprint_errors: usize,
}

/// Reads a report: its violations in order, and its header counts.
pub fn parse_report(report: &str) -> (Vec<DrcViolation>, Counts) {
    let mut violations: Vec<DrcViolation> = Vec::new();
    let mut counts = Counts::default();
    let mut section = Section::Violation;
    for line in report.lines() {
        let trimmed = line.trim();
        if let Some(header) = trimmed.strip_prefix("** Found ") {
            let number = header
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if header.contains("DRC violations") {
                section = Section::Violation;
                counts.violations = number;
            } else if header.contains("unconnected") {
                section = Section::Unconnected;
                counts.unconnected = number;
            } else if header.contains("Footprint") {
                section = Section::Footprint;
                counts.footprint_errors = number;
            }
        } else if let Some(rest) = trimmed.strip_prefix('[') {
            let (kind, description) = rest.split_once("]:").unwrap_or((rest, ""));
            violations.push(DrcViolation {
                section,
                kind: kind.trim_end_matches(']').to_owned(),
                description: description.trim().to_owned(),
                severity: "error".to_owned(),
                rule: None,
                places: Vec::new(),
                excluded: false,
            });
        } else if let Some(current) = violations.last_mut() {
            if let Some(place) = trimmed.strip_prefix("@(") {
                if let Some(place) = parse_place(place) {
                    current.places.push(place);
                }
            } else if let Some((before, severity)) = trimmed.split_once("Severity: ") {
                current.severity = severity.trim().to_owned();
                current.rule = before
                    .trim()
                    .trim_end_matches(';')
                    .strip_prefix("Rule: ")
                    .map(str::to_owned);
            }
        }
    }
    (violations, counts)
}

/// `73.6600 mm, 40.6400 mm): Line on Edge.Cuts`.
fn parse_place(text: &str) -> Option<Place> {
    let (coordinates, item) = text.split_once("):")?;
    let (x, y) = coordinates.split_once(',')?;
    let number = |s: &str| s.trim().trim_end_matches("mm").trim().parse::<f64>().ok();
    Some(Place {
        x_mm: number(x)?,
        y_mm: number(y)?,
        item: item.trim().to_owned(),
    })
}

/// The exclusions a project file holds: (kind, x mm, y mm) of each.
pub fn exclusions(project: &Value) -> Vec<(String, f64, f64)> {
    project
        .pointer("/board/design_settings/drc_exclusions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|entry| {
            let mut parts = entry.split('|');
            let kind = parts.next()?.to_owned();
            let x: f64 = parts.next()?.parse().ok()?;
            let y: f64 = parts.next()?.parse().ok()?;
            Some((kind, x / 1e6, y / 1e6))
        })
        .collect()
}

/// Marks each violation an exclusion names (same kind, marker within a micrometre).
pub fn apply_exclusions(violations: &mut [DrcViolation], excluded: &[(String, f64, f64)]) {
    for violation in violations.iter_mut() {
        if let Some(marker) = violation.places.first() {
            violation.excluded = excluded.iter().any(|(kind, x, y)| {
                *kind == violation.kind && (x - marker.x_mm).abs() < 1e-3 && (y - marker.y_mm).abs() < 1e-3
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "** Drc report for /w/board.kicad_pcb **
** Created on 2026-12-06 11:44:57 **

** Found 2 DRC violations **
[clearance]: Clearance violation (netclass 'Default' clearance 0.2000 mm; actual 0.0500 mm)
    Rule: netclass 'Default'; Severity: error
    @(20.0000 mm, 10.0000 mm): Track [A] on F.Cu, length 10.0000 mm
    @(20.0000 mm, 10.2500 mm): Track [B] on F.Cu, length 10.0000 mm
[silk_over_copper]: Silkscreen clipped by solder mask
    Rule: board setup constraints silk; Severity: warning
    @(73.6600 mm, 40.6400 mm): Line on Edge.Cuts

** Found 1 unconnected pads **
[unconnected_items]: Missing connection between items
    Local override; Severity: error
    @(1.0000 mm, 2.0000 mm): Pad 1 [B] of R1 on F.Cu
    @(3.0000 mm, 2.0000 mm): Pad 2 [B] of R2 on F.Cu

** Found 0 Footprint errors **

** End of Report **
";

    #[test]
    fn a_report_reads_as_its_violations_with_places_rules_and_severities() {
        let (violations, counts) = parse_report(REPORT);
        assert_eq!(
            counts,
            Counts {
                violations: 2,
                unconnected: 1,
                footprint_errors: 0
            }
        );
        assert_eq!(violations.len(), 3);
        assert_eq!(violations[0].kind, "clearance");
        assert_eq!(violations[0].rule.as_deref(), Some("netclass 'Default'"));
        assert_eq!(violations[0].places[1].y_mm, 10.25);
        assert_eq!(
            violations[0].places[1].item,
            "Track [B] on F.Cu, length 10.0000 mm"
        );
        assert_eq!(violations[1].severity, "warning");
        assert_eq!(violations[2].section, Section::Unconnected);
        assert_eq!(violations[2].rule, None);
    }

    #[test]
    fn an_exclusion_marks_the_violation_at_its_marker_and_no_other() {
        let (mut violations, _) = parse_report(REPORT);
        let project = serde_json::json!({"board": {"design_settings": {"drc_exclusions": [
            "silk_over_copper|73660000|40640000|00000000-0000-0000-0000-000000000000|00000000-0000-0000-0000-000000000000",
            "clearance|1|1|x|y"
        ]}}});
        apply_exclusions(&mut violations, &exclusions(&project));
        let excluded: Vec<bool> = violations.iter().map(|v| v.excluded).collect();
        assert_eq!(excluded, [false, true, false]);
    }
}
