//! A SPICE netlist as the caller sends it, checked before ngspice sees it: what it may hold (the
//! circuit, never a `.control` block, an include or an analysis — the tool called chooses the
//! analysis), each refusal naming its line; and what it holds (its elements and nodes).

use std::collections::BTreeSet;

/// The largest netlist accepted, in bytes.
pub const MAX_NETLIST_BYTES: usize = 256 * 1024;

/// The most lines a netlist may have.
pub const MAX_NETLIST_LINES: usize = 5_000;

/// The dot cards a netlist may hold: the circuit and its measurements.
const ALLOWED_CARDS: &[&str] = &[
    ".model", ".subckt", ".ends", ".param", ".options", ".option", ".opt", ".temp", ".ic", ".nodeset",
    ".func", ".global", ".meas", ".measure", ".end", ".title",
];

/// Dot cards that choose or print an analysis: the tool called does that.
const ANALYSIS_CARDS: &[&str] = &[
    ".op", ".dc", ".ac", ".tran", ".noise", ".tf", ".sens", ".pz", ".disto", ".four", ".print", ".plot",
    ".probe", ".save", ".width",
];

/// A netlist refused, naming the line (1-based, as the caller's text counts it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("netlist line {line}: {message}")]
pub struct NetlistError {
    /// The line, 1-based (0 for the netlist as a whole).
    pub line: usize,
    /// What is wrong and what to do instead.
    pub message: String,
}

fn refuse(line: usize, message: impl Into<String>) -> NetlistError {
    NetlistError {
        line,
        message: message.into(),
    }
}

/// One circuit element.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Element {
    /// Its name as written (`R1`, `V1`, `X3`).
    pub name: String,
    /// Its kind, from the first letter (`resistor`, `voltage_source`, …).
    pub kind: &'static str,
    /// The nodes it connects, in order.
    pub nodes: Vec<String>,
    /// Its line in the caller's text.
    pub line: usize,
}

/// A checked netlist: the text ngspice runs and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netlist {
    /// The title (SPICE's first line).
    pub title: String,
    /// The circuit's lines (continuations joined; comments, blank lines and `.end` left out),
    /// each with its line number in the caller's text.
    pub body: Vec<(usize, String)>,
    /// The elements, in order.
    pub elements: Vec<Element>,
    /// Every node but ground (`0`, `gnd`), sorted.
    pub nodes: Vec<String>,
}

impl Netlist {
    /// Checks `text`: the first line is the title; `*` lines are comments; `+` continues the
    /// line before.
    ///
    /// # Errors
    /// A [`NetlistError`] naming the first line that may not be run, or the netlist as a whole
    /// when it is empty or too large.
    pub fn check(text: &str) -> Result<Self, NetlistError> {
        if text.len() > MAX_NETLIST_BYTES {
            return Err(refuse(
                0,
                format!(
                    "the netlist is {} bytes; at most {MAX_NETLIST_BYTES} are accepted",
                    text.len()
                ),
            ));
        }
        let lines: Vec<&str> = text.lines().collect();
        if lines.len() > MAX_NETLIST_LINES {
            return Err(refuse(
                0,
                format!(
                    "the netlist has {} lines; at most {MAX_NETLIST_LINES} are accepted",
                    lines.len()
                ),
            ));
        }
        let Some((title, rest)) = lines.split_first() else {
            return Err(refuse(
                0,
                "the netlist is empty: send a title line, then the circuit",
            ));
        };
        let mut body: Vec<(usize, String)> = Vec::new();
        for (index, raw) in rest.iter().enumerate() {
            let number = index + 2;
            if raw.contains('\0') {
                return Err(refuse(number, "holds a NUL character"));
            }
            let line = raw.trim();
            if line.is_empty() || line.starts_with('*') {
                continue;
            }
            if let Some(more) = line.strip_prefix('+') {
                match body.last_mut() {
                    Some((_, previous)) => {
                        previous.push(' ');
                        previous.push_str(more.trim());
                        continue;
                    }
                    None => return Err(refuse(number, "a continuation (+) with no line before it")),
                }
            }
            body.push((number, line.to_owned()));
        }
        let mut kept = Vec::with_capacity(body.len());
        let mut elements = Vec::new();
        let mut nodes = BTreeSet::new();
        let mut in_subckt = 0_usize;
        for (number, line) in body {
            let first = line
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase();
            if first.starts_with('.') {
                check_card(number, &first)?;
                match first.as_str() {
                    ".end" => break,
                    ".subckt" => in_subckt += 1,
                    ".ends" => in_subckt = in_subckt.saturating_sub(1),
                    _ => {}
                }
                kept.push((number, line));
                continue;
            }
            let element = element(number, &line)?;
            if in_subckt == 0 {
                nodes.extend(element.nodes.iter().filter(|n| !is_ground(n)).cloned());
                elements.push(element);
            }
            kept.push((number, line));
        }
        if elements.is_empty() {
            return Err(refuse(0, "the netlist has no elements at the top level"));
        }
        Ok(Self {
            title: title.trim().to_owned(),
            body: kept,
            elements,
            nodes: nodes.into_iter().collect(),
        })
    }

    /// The netlist's text followed by `control` commands in a `.control` block, as ngspice runs
    /// it in batch mode.
    pub fn deck(&self, control: &[String]) -> String {
        let mut deck = String::with_capacity(1024);
        deck.push_str(&self.title);
        deck.push('\n');
        // Each kept line at its own line number (a left-out line becomes an empty comment), so a
        // line ngspice names is the caller's line.
        let mut next = 2;
        for (number, line) in &self.body {
            while next < *number {
                deck.push_str("*\n");
                next += 1;
            }
            deck.push_str(line);
            deck.push('\n');
            next += 1;
        }
        deck.push_str(".control\n");
        for command in control {
            deck.push_str(command);
            deck.push('\n');
        }
        deck.push_str(".endc\n.end\n");
        deck
    }

    /// Whether `node` is one of the circuit's nodes.
    pub fn has_node(&self, node: &str) -> bool {
        self.nodes.iter().any(|n| n.eq_ignore_ascii_case(node))
    }

    /// Whether an independent source `name` exists (a DC sweep's source).
    pub fn has_source(&self, name: &str) -> bool {
        self.elements.iter().any(|e| {
            e.name.eq_ignore_ascii_case(name) && matches!(e.kind, "voltage_source" | "current_source")
        })
    }
}

/// Ground, in SPICE's spellings.
pub fn is_ground(node: &str) -> bool {
    node == "0" || node.eq_ignore_ascii_case("gnd")
}

fn check_card(number: usize, card: &str) -> Result<(), NetlistError> {
    if ALLOWED_CARDS.contains(&card) {
        return Ok(());
    }
    if ANALYSIS_CARDS.contains(&card) {
        return Err(refuse(
            number,
            format!(
                "{card}: the analysis is chosen by the tool you call (spice.op, spice.dc, spice.ac, spice.transient); remove this line"
            ),
        ));
    }
    match card {
        ".control" | ".endc" => Err(refuse(
            number,
            "a .control block runs ngspice's shell language (files, shell commands): it is not accepted; the tool writes its own",
        )),
        ".include" | ".inc" | ".lib" => Err(refuse(
            number,
            format!("{card} reads another file: paste the models into the netlist instead"),
        )),
        other => Err(refuse(
            number,
            format!(
                "{other} is not a card this tool accepts; allowed: {}",
                ALLOWED_CARDS.join(" ")
            ),
        )),
    }
}

/// How many nodes an element of each kind connects (its leading tokens after the name).
fn element_shape(letter: char) -> Option<(&'static str, Option<usize>)> {
    Some(match letter {
        'r' => ("resistor", Some(2)),
        'c' => ("capacitor", Some(2)),
        'l' => ("inductor", Some(2)),
        'v' => ("voltage_source", Some(2)),
        'i' => ("current_source", Some(2)),
        'd' => ("diode", Some(2)),
        'b' => ("behavioural_source", Some(2)),
        'e' => ("vcvs", Some(4)),
        'g' => ("vccs", Some(4)),
        'f' => ("cccs", Some(2)),
        'h' => ("ccvs", Some(2)),
        'q' => ("bjt", Some(3)),
        'j' => ("jfet", Some(3)),
        'm' => ("mosfet", Some(4)),
        's' => ("voltage_switch", Some(4)),
        'w' => ("current_switch", Some(2)),
        't' => ("transmission_line", Some(4)),
        'k' => ("coupling", Some(0)),
        'x' => ("subcircuit", None),
        _ => return None,
    })
}

fn element(number: usize, line: &str) -> Result<Element, NetlistError> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let name = tokens[0];
    let letter = name
        .chars()
        .next()
        .map(|c| c.to_ascii_lowercase())
        .unwrap_or_default();
    let Some((kind, count)) = element_shape(letter) else {
        return Err(refuse(
            number,
            format!(
                "{name}: not an element this tool knows (a line starts with R, C, L, V, I, D, B, E, F, G, H, Q, J, M, S, W, T, K or X)"
            ),
        ));
    };
    let nodes: Vec<String> = match count {
        Some(n) => {
            if tokens.len() < n + 1 + usize::from(n > 0 && letter != 'k') {
                return Err(refuse(
                    number,
                    format!("{name}: a {kind} needs {n} nodes and a value or model"),
                ));
            }
            tokens[1..=n].iter().map(|t| (*t).to_owned()).collect()
        }
        None => {
            // X<name> <nodes…> <subcircuit> [params=…]: the nodes are the tokens before the
            // subcircuit's name (the last token that is not a parameter).
            let positional: Vec<&str> = tokens[1..]
                .iter()
                .copied()
                .take_while(|t| !t.contains('='))
                .collect();
            if positional.len() < 2 {
                return Err(refuse(
                    number,
                    format!("{name}: a subcircuit call needs its nodes and the subcircuit's name"),
                ));
            }
            positional[..positional.len() - 1]
                .iter()
                .map(|t| (*t).to_owned())
                .collect()
        }
    };
    Ok(Element {
        name: name.to_owned(),
        kind,
        nodes,
        line: number,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_divider_has_its_elements_and_nodes() {
        let netlist =
            Netlist::check("divider\nV1 in 0 DC 5\nR1 in out 10k\n* a comment\nR2 out 0\n+ 10k\n.end\n")
                .unwrap();
        assert_eq!(netlist.title, "divider");
        assert_eq!(netlist.nodes, ["in", "out"]);
        let names: Vec<&str> = netlist.elements.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["V1", "R1", "R2"]);
        assert_eq!(
            netlist.elements[2].line, 5,
            "a continued element keeps its first line"
        );
        assert!(netlist.has_source("v1") && !netlist.has_source("R1"));
    }

    #[test]
    fn what_could_leave_the_circuit_is_refused_with_its_line() {
        let cases = [
            ("t\nR1 a 0 1k\n.control\nshell rm -rf /\n.endc\n", 3, ".control"),
            ("t\nR1 a 0 1k\n.include /etc/passwd\n", 3, "reads another file"),
            ("t\nR1 a 0 1k\n.tran 1u 1m\n", 3, "chosen by the tool"),
            ("t\nR1 a 0 1k\n.exec foo\n", 3, "not a card"),
            ("t\nR1 a 0\n", 2, "needs 2 nodes"),
            ("t\nZ1 a 0 1k\n", 2, "not an element"),
            ("t\n+ 1k\n", 2, "continuation"),
            ("", 0, "empty"),
            ("t\n* nothing\n", 0, "no elements"),
        ];
        for (text, line, words) in cases {
            let err = Netlist::check(text).unwrap_err();
            assert_eq!(err.line, line, "{text:?}: {err}");
            assert!(err.message.contains(words), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_subcircuits_inner_nodes_are_not_the_circuits() {
        let netlist = Netlist::check(
            "t\n.subckt buf a b\nR9 a inner 1k\nR8 inner b 1k\n.ends\nX1 in out buf\nV1 in 0 1\nR1 out 0 1k\n",
        )
        .unwrap();
        assert_eq!(netlist.nodes, ["in", "out"]);
        assert_eq!(netlist.elements[0].nodes, ["in", "out"]);
    }

    #[test]
    fn the_deck_appends_the_tools_control_block() {
        let netlist = Netlist::check("t\nV1 a 0 1\n* note\nR1 a 0\n+ 1k\n.end\n").unwrap();
        assert_eq!(
            netlist.deck(&["op".to_owned(), "print all".to_owned()]),
            "t\nV1 a 0 1\n*\nR1 a 0 1k\n.control\nop\nprint all\n.endc\n.end\n",
            "each line keeps its number"
        );
    }
}
