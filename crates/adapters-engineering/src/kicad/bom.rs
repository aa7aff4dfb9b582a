//! A bill of materials from a KiCad 6 schematic's own s-expressions: the root sheet's
//! `symbol_instances` lists every placed symbol of the whole hierarchy with its reference, unit,
//! value and footprint; the symbols themselves (in the root and its sub-sheets) say whether they
//! belong in the BOM (`in_bom`). Power symbols and flags (`#PWR01`, `#FLG02`) never do; a symbol
//! with several units counts once per reference.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kiutils_sexpr::{Atom, Node};
use serde::Serialize;

/// One line of the BOM: the parts sharing a value and a footprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BomGroup {
    /// The value (`10K`, `100nF`, `PIC16F54`).
    pub value: String,
    /// The footprint (`Resistor_THT:R_Axial_DIN0207…`; empty when none is assigned).
    pub footprint: String,
    /// The references, in natural order (`R2` before `R10`).
    pub references: Vec<String>,
    /// How many parts: the number of references.
    pub quantity: usize,
}

/// Why a schematic gives no BOM.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BomError {
    /// The text is not an s-expression.
    #[error("not a KiCad schematic: {0}")]
    Parse(String),
    /// It parses but is no `kicad_sch`.
    #[error("not a KiCad schematic: the file's first form is not (kicad_sch …)")]
    NotSchematic,
    /// A schematic without `symbol_instances`: a sub-sheet, or a KiCad 7+ file.
    #[error(
        "this schematic has no symbol_instances: give the root sheet of a KiCad 6 project (a sub-sheet's parts are listed in its root)"
    )]
    NotRoot,
}

/// The children of `node` when it is a list headed by `head`.
fn list<'a>(node: &'a Node, head: &str) -> Option<&'a [Node]> {
    match node {
        Node::List { items, .. } => match items.first() {
            Some(Node::Atom {
                atom: Atom::Symbol(name),
                ..
            }) if name == head => Some(&items[1..]),
            Some(_) | None => None,
        },
        Node::Atom { .. } => None,
    }
}

/// The text of an atom.
fn text(node: &Node) -> Option<&str> {
    match node {
        Node::Atom {
            atom: Atom::Symbol(s) | Atom::Quoted(s),
            ..
        } => Some(s),
        Node::List { .. } => None,
    }
}

/// The first atom of the child list `(head value …)` of `items`.
fn field<'a>(items: &'a [Node], head: &str) -> Option<&'a str> {
    items
        .iter()
        .find_map(|n| list(n, head))
        .and_then(|rest| rest.first())
        .and_then(text)
}

/// The root form of a schematic's text.
fn root(text_of_file: &str) -> Result<Vec<Node>, BomError> {
    let doc = kiutils_sexpr::parse_one(text_of_file).map_err(|e| BomError::Parse(e.to_string()))?;
    let first = doc.nodes.into_iter().next().ok_or(BomError::NotSchematic)?;
    match list(&first, "kicad_sch") {
        Some(_) => match first {
            Node::List { mut items, .. } => {
                items.remove(0);
                Ok(items)
            }
            Node::Atom { .. } => Err(BomError::NotSchematic),
        },
        None => Err(BomError::NotSchematic),
    }
}

/// The sub-sheet files a sheet's text names (`(sheet … (property "Sheet file" "x.kicad_sch"))`).
pub fn sheet_files(schematic: &str) -> Result<Vec<String>, BomError> {
    Ok(root(schematic)?
        .iter()
        .filter_map(|n| list(n, "sheet"))
        .filter_map(|sheet| {
            sheet.iter().filter_map(|n| list(n, "property")).find_map(|p| {
                (p.first().and_then(text) == Some("Sheet file"))
                    .then(|| p.get(1).and_then(text).map(str::to_owned))
                    .flatten()
            })
        })
        .collect())
}

/// The `in_bom` flag of every placed symbol of a sheet, by its uuid.
fn in_bom_flags(schematic: &str, flags: &mut HashMap<String, bool>) -> Result<(), BomError> {
    for symbol in root(schematic)?.iter().filter_map(|n| list(n, "symbol")) {
        if let Some(uuid) = field(symbol, "uuid") {
            flags.insert(uuid.to_owned(), field(symbol, "in_bom") != Some("no"));
        }
    }
    Ok(())
}

/// The BOM of the root schematic `root_text` whose sub-sheets' texts are `sheets`, grouped by
/// value and footprint, in the order of value then footprint.
///
/// # Errors
/// [`BomError`] when a text is not a schematic or the root has no `symbol_instances`.
pub fn bom(root_text: &str, sheets: &[String]) -> Result<Vec<BomGroup>, BomError> {
    let mut flags = HashMap::new();
    in_bom_flags(root_text, &mut flags)?;
    for sheet in sheets {
        in_bom_flags(sheet, &mut flags)?;
    }
    let forms = root(root_text)?;
    let instances = forms
        .iter()
        .find_map(|n| list(n, "symbol_instances"))
        .ok_or(BomError::NotRoot)?;
    let mut groups: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for path in instances.iter().filter_map(|n| list(n, "path")) {
        let Some(reference) = field(path, "reference") else {
            continue;
        };
        let symbol = path
            .first()
            .and_then(text)
            .and_then(|p| p.rsplit('/').next())
            .unwrap_or("");
        if reference.starts_with('#') || flags.get(symbol) == Some(&false) {
            continue;
        }
        let value = field(path, "value").unwrap_or("").to_owned();
        let footprint = field(path, "footprint").unwrap_or("").to_owned();
        groups
            .entry((value, footprint))
            .or_default()
            .insert(reference.to_owned());
    }
    Ok(groups
        .into_iter()
        .map(|((value, footprint), references)| {
            let mut references: Vec<String> = references.into_iter().collect();
            references.sort_by_key(|r| natural(r));
            BomGroup {
                value,
                footprint,
                quantity: references.len(),
                references,
            }
        })
        .collect())
}

/// A reference's sort key: its letters, then its number (`R2` before `R10`).
fn natural(reference: &str) -> (String, u64, String) {
    let letters: String = reference.chars().take_while(|c| !c.is_ascii_digit()).collect();
    let rest = &reference[letters.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let number = digits.parse().unwrap_or(0);
    (letters, number, rest[digits.len()..].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHEET: &str = r##"(kicad_sch (version 20211123) (generator eeschema)
      (symbol (lib_id "Device:R") (at 0 0 0) (unit 1) (in_bom yes) (on_board yes) (uuid aa-1)
        (property "Reference" "R1" (id 0)) (property "Value" "10K" (id 1)))
      (symbol (lib_id "Device:R") (at 0 0 0) (unit 1) (in_bom no) (on_board yes) (uuid aa-2)
        (property "Reference" "R3" (id 0)) (property "Value" "10K" (id 1)))
      (sheet (at 0 0) (size 1 1) (uuid s-1) (property "Sheet name" "sub" (id 0)) (property "Sheet file" "sub.kicad_sch" (id 1)))
      (symbol_instances
        (path "/aa-1" (reference "R1") (unit 1) (value "10K") (footprint "R_0603"))
        (path "/aa-2" (reference "R3") (unit 1) (value "10K") (footprint "R_0603"))
        (path "/s-1/bb-1" (reference "R10") (unit 1) (value "10K") (footprint "R_0603"))
        (path "/s-1/bb-2" (reference "U1") (unit 1) (value "LM358") (footprint "SOIC-8"))
        (path "/s-1/bb-3" (reference "U1") (unit 2) (value "LM358") (footprint "SOIC-8"))
        (path "/pw" (reference "#PWR01") (unit 1) (value "GND") (footprint ""))))"##;

    #[test]
    fn groups_count_each_reference_once_and_leave_out_power_and_excluded_symbols() {
        let groups = bom(SHEET, &[]).unwrap();
        assert_eq!(
            groups,
            vec![
                BomGroup {
                    value: "10K".into(),
                    footprint: "R_0603".into(),
                    references: vec!["R1".into(), "R10".into()],
                    quantity: 2,
                },
                BomGroup {
                    value: "LM358".into(),
                    footprint: "SOIC-8".into(),
                    references: vec!["U1".into()],
                    quantity: 1,
                },
            ]
        );
        assert_eq!(sheet_files(SHEET).unwrap(), vec!["sub.kicad_sch".to_owned()]);
    }

    #[test]
    fn a_sheet_without_instances_and_a_non_schematic_are_refused_by_name() {
        assert_eq!(bom("(kicad_sch (version 1))", &[]), Err(BomError::NotRoot));
        assert_eq!(bom("(kicad_pcb (version 1))", &[]), Err(BomError::NotSchematic));
        assert!(matches!(bom("(kicad_sch", &[]), Err(BomError::Parse(_))));
    }

    #[test]
    fn references_sort_by_their_number() {
        let mut refs = vec!["R10", "R2", "C1", "R1"];
        refs.sort_by_key(|r| natural(r));
        assert_eq!(refs, ["C1", "R1", "R2", "R10"]);
    }
}
