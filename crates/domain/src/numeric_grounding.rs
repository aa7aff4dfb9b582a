//! Numeric grounding (issue 40, step 6; beyond the spec, which defers it): a reply that states a
//! quantity of a kind a tool of this turn computed — a stress, displacement, force, mass, safety
//! factor, voltage, current, frequency, gain or time — with a value no tool returned is flagged,
//! naming what the tools did return. Deterministic, no model call.
//!
//! The rules, each chosen so a faithful reply is never flagged:
//! - only kinds some successful call of the turn returned as evidence
//!   (`result.evidence.quantities`, `metaforge_ports::ToolEvidence`) are checked: a number the
//!   tools said nothing about cannot be judged;
//! - values are compared in SI units, by magnitude (a downward deflection of −0.19 mm is stated
//!   as 0.19 mm);
//! - a stated value agrees when it is within 2 % of a returned one, or within half a unit of its
//!   own last stated digit (0.2 mm states 0.191 mm faithfully);
//! - a number that appears in the turn's call arguments or in what the model was given (a load
//!   of 100 N, a 100 mm beam) is an input, not a claim about a result.

use std::sync::LazyLock;

use metaforge_ports::QuantityKind;
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The relative difference a stated value may have from a returned one.
pub const RELATIVE_TOLERANCE: f64 = 0.02;

/// A stated quantity no tool of the turn returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumericMismatch {
    /// The quantity as the reply states it (`119.1 MPa`).
    pub stated: String,
    /// What it measures.
    pub kind: QuantityKind,
    /// What the tools returned of that kind (`59.54 MPa (fea.static max_von_mises_stress)`).
    pub returned: Vec<String>,
}

/// A unit the reply may state: its symbol, kind and factor to SI.
const UNITS: &[(&str, QuantityKind, f64)] = &[
    ("GPa", QuantityKind::Stress, 1e9),
    ("MPa", QuantityKind::Stress, 1e6),
    ("kPa", QuantityKind::Stress, 1e3),
    ("Pa", QuantityKind::Stress, 1.0),
    ("N/mm²", QuantityKind::Stress, 1e6),
    ("N/mm2", QuantityKind::Stress, 1e6),
    ("kN", QuantityKind::Force, 1e3),
    ("N", QuantityKind::Force, 1.0),
    ("mm", QuantityKind::Displacement, 1e-3),
    ("cm", QuantityKind::Displacement, 1e-2),
    ("µm", QuantityKind::Displacement, 1e-6),
    ("μm", QuantityKind::Displacement, 1e-6),
    ("um", QuantityKind::Displacement, 1e-6),
    ("m", QuantityKind::Displacement, 1.0),
    ("kg", QuantityKind::Mass, 1.0),
    ("g", QuantityKind::Mass, 1e-3),
    ("mV", QuantityKind::Voltage, 1e-3),
    ("µV", QuantityKind::Voltage, 1e-6),
    ("μV", QuantityKind::Voltage, 1e-6),
    ("kV", QuantityKind::Voltage, 1e3),
    ("V", QuantityKind::Voltage, 1.0),
    ("mA", QuantityKind::Current, 1e-3),
    ("µA", QuantityKind::Current, 1e-6),
    ("μA", QuantityKind::Current, 1e-6),
    ("uA", QuantityKind::Current, 1e-6),
    ("A", QuantityKind::Current, 1.0),
    ("GHz", QuantityKind::Frequency, 1e9),
    ("MHz", QuantityKind::Frequency, 1e6),
    ("kHz", QuantityKind::Frequency, 1e3),
    ("Hz", QuantityKind::Frequency, 1.0),
    ("dB", QuantityKind::Gain, 1.0),
    ("ms", QuantityKind::Time, 1e-3),
    ("µs", QuantityKind::Time, 1e-6),
    ("μs", QuantityKind::Time, 1e-6),
    ("us", QuantityKind::Time, 1e-6),
    ("ns", QuantityKind::Time, 1e-9),
    ("s", QuantityKind::Time, 1.0),
];

/// The kind and SI factor of `unit` (a safety factor has none: empty).
pub fn unit_of(unit: &str) -> Option<(QuantityKind, f64)> {
    if unit.is_empty() {
        return Some((QuantityKind::SafetyFactor, 1.0));
    }
    UNITS
        .iter()
        .find(|(symbol, _, _)| *symbol == unit)
        .map(|(_, kind, factor)| (*kind, *factor))
}

const NUMBER: &str = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?";

static STATED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    let mut symbols: Vec<&str> = UNITS.iter().map(|(s, _, _)| *s).collect();
    symbols.sort_by_key(|s| std::cmp::Reverse(s.chars().count()));
    let alternatives = symbols
        .iter()
        .map(|s| regex::escape(s))
        .collect::<Vec<_>>()
        .join("|");
    Regex::new(&format!(
        r"(?:^|[^\w.])({NUMBER})\s?(?:×\s?10\^?([-+]?\d+)\s?)?({alternatives})(?:[^\w/²]|$)"
    ))
    .ok()
});
static SAFETY_FACTOR: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?i)\b(?:safety factor|factor of safety|FoS)\b[^0-9\n]{{0,20}}?({NUMBER})"
    ))
    .ok()
});
static ANY_NUMBER: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(NUMBER).ok());

/// A stated value: as written, in SI, and half a unit of its last digit in SI.
struct Stated {
    text: String,
    kind: QuantityKind,
    si: f64,
    half_digit: f64,
    written: f64,
}

/// Half a unit of the last digit of `number` as written (`0.2` → 0.05, `60` → 0.5).
fn half_last_digit(number: &str) -> f64 {
    let mantissa = number.split(['e', 'E']).next().unwrap_or(number);
    let decimals = mantissa.split_once('.').map_or(0, |(_, d)| d.len());
    let exponent: i32 = number
        .split_once(['e', 'E'])
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0);
    0.5 * 10f64.powi(exponent - i32::try_from(decimals).unwrap_or(0))
}

fn stated_quantities(reply: &str) -> Vec<Stated> {
    let mut out = Vec::new();
    if let Some(re) = STATED.as_ref() {
        for caps in re.captures_iter(reply) {
            let (Some(number), Some(unit)) = (caps.get(1), caps.get(3)) else {
                continue;
            };
            let Ok(written) = number.as_str().parse::<f64>() else {
                continue;
            };
            let Some((kind, factor)) = unit_of(unit.as_str()) else {
                continue;
            };
            let power = caps
                .get(2)
                .and_then(|p| p.as_str().parse::<i32>().ok())
                .map_or(1.0, |p| 10f64.powi(p));
            out.push(Stated {
                text: format!("{} {}", number.as_str(), unit.as_str()),
                kind,
                si: written * power * factor,
                half_digit: half_last_digit(number.as_str()) * power * factor,
                written,
            });
        }
    }
    if let Some(re) = SAFETY_FACTOR.as_ref() {
        for caps in re.captures_iter(reply) {
            let Some(number) = caps.get(1) else { continue };
            let Ok(written) = number.as_str().parse::<f64>() else {
                continue;
            };
            out.push(Stated {
                text: format!("safety factor {}", number.as_str()),
                kind: QuantityKind::SafetyFactor,
                si: written,
                half_digit: half_last_digit(number.as_str()),
                written,
            });
        }
    }
    out
}

/// A returned quantity: its kind, SI value and how to name it.
struct Returned {
    kind: QuantityKind,
    si: f64,
    text: String,
}

/// The quantities the evidence of `result` (a successful call's) holds.
fn returned_quantities(tool: &str, result: &Value) -> Vec<Returned> {
    let Some(quantities) = result.pointer("/evidence/quantities").and_then(Value::as_array) else {
        return Vec::new();
    };
    let source = result
        .pointer("/evidence/tool")
        .and_then(Value::as_str)
        .unwrap_or(tool);
    quantities
        .iter()
        .filter_map(|q| {
            let value = q.get("value")?.as_f64()?;
            let unit = q.get("unit")?.as_str()?;
            let name = q.get("name")?.as_str()?;
            let kind: QuantityKind = serde_json::from_value(q.get("kind")?.clone()).ok()?;
            let (unit_kind, factor) = unit_of(unit)?;
            (unit_kind == kind).then(|| Returned {
                kind,
                si: value * factor,
                text: format!("{} ({source} {name})", format_value(value, unit)),
            })
        })
        .collect()
}

fn format_value(value: f64, unit: &str) -> String {
    let shown = format!("{value:.4}");
    let trimmed = shown.trim_end_matches('0').trim_end_matches('.');
    if unit.is_empty() {
        trimmed.to_owned()
    } else {
        format!("{trimmed} {unit}")
    }
}

fn agrees(stated: &Stated, returned: f64) -> bool {
    let (a, b) = (stated.si.abs(), returned.abs());
    (a - b).abs() <= (RELATIVE_TOLERANCE * b).max(stated.half_digit)
}

/// The quantities `reply` states that disagree with every value of their kind the turn's
/// successful calls returned (`calls`: tool, arguments, result), leaving out numbers given as
/// input in the arguments or `context`.
pub fn numeric_mismatches(
    reply: &str,
    calls: &[(&str, &Value, &Value)],
    context: &str,
) -> Vec<NumericMismatch> {
    let returned: Vec<Returned> = calls
        .iter()
        .flat_map(|(tool, _, result)| returned_quantities(tool, result))
        .collect();
    if returned.is_empty() {
        return Vec::new();
    }
    let mut inputs: Vec<f64> = Vec::new();
    let mut scan = |text: &str| {
        if let Some(re) = ANY_NUMBER.as_ref() {
            inputs.extend(
                re.find_iter(text)
                    .filter_map(|m| m.as_str().parse::<f64>().ok())
                    .map(f64::abs),
            );
        }
    };
    for (_, arguments, _) in calls {
        scan(&arguments.to_string());
    }
    scan(context);
    let mut out: Vec<NumericMismatch> = Vec::new();
    for stated in stated_quantities(reply) {
        let same_kind: Vec<&Returned> = returned.iter().filter(|r| r.kind == stated.kind).collect();
        if same_kind.is_empty() || same_kind.iter().any(|r| agrees(&stated, r.si)) {
            continue;
        }
        let written = stated.written.abs();
        if inputs
            .iter()
            .any(|n| (n - written).abs() <= 1e-9 * written.max(1.0))
        {
            continue;
        }
        if out.iter().any(|m| m.stated == stated.text) {
            continue;
        }
        out.push(NumericMismatch {
            stated: stated.text,
            kind: stated.kind,
            returned: same_kind.iter().map(|r| r.text.clone()).collect(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fea_result() -> Value {
        json!({"evidence": {"tool": "fea.static", "quantities": [
            {"name": "max_von_mises_stress", "kind": "stress", "value": 59.54, "unit": "MPa"},
            {"name": "max_displacement", "kind": "displacement", "value": 0.19102, "unit": "mm"},
            {"name": "safety_factor", "kind": "safety_factor", "value": 3.947, "unit": ""},
        ]}})
    }

    fn check(reply: &str) -> Vec<NumericMismatch> {
        let arguments = json!({"solid": {"x_mm": 100, "y_mm": 10}, "forces": [{"force_n": [0, -100, 0]}]});
        let result = fea_result();
        numeric_mismatches(reply, &[("mcp_fea_fea_static", &arguments, &result)], "")
    }

    #[test]
    fn faithful_statements_rounded_or_in_other_units_pass() {
        for reply in [
            "Max stress 59.5 MPa, tip deflection 0.19 mm, safety factor 3.9.",
            "The stress is about 60 MPa and the deflection 0.2 mm.",
            "Peak stress 5.954e7 Pa; deflection 191 µm; factor of safety of 3.95.",
            "A 100 mm beam under a 100 N load.",
        ] {
            assert_eq!(check(reply), Vec::new(), "{reply}");
        }
    }

    #[test]
    fn a_wrong_stress_or_safety_factor_is_named_with_what_the_tool_returned() {
        let found = check("The maximum von Mises stress is 119.1 MPa with a safety factor of 2.0.");
        let stated: Vec<&str> = found.iter().map(|m| m.stated.as_str()).collect();
        assert_eq!(stated, ["119.1 MPa", "safety factor 2.0"]);
        assert_eq!(found[0].kind, QuantityKind::Stress);
        assert_eq!(found[0].returned, ["59.54 MPa (fea.static max_von_mises_stress)"]);
    }

    #[test]
    fn kinds_no_tool_returned_and_turns_without_evidence_are_not_judged() {
        assert_eq!(check("The supply is 12 V and the mass 3 kg."), Vec::new());
        let plain = json!({"ok": true});
        assert_eq!(
            numeric_mismatches("Stress 500 MPa.", &[("x", &json!({}), &plain)], ""),
            Vec::new()
        );
    }

    #[test]
    fn half_a_unit_of_the_last_digit() {
        assert!((half_last_digit("0.2") - 0.05).abs() < 1e-12);
        assert!((half_last_digit("60") - 0.5).abs() < 1e-12);
        assert!((half_last_digit("5.9e7") - 0.05e7).abs() < 1e-3);
    }
}
