//! What an engineering tool says it computed, in a form MetaForge can record without trusting a
//! model to copy it (issue 40, step 5): the quantities with their units, the programs and
//! versions that computed them, the hash of the exact input, the sandbox it ran in, and its
//! output files.
//!
//! A tool result carries it as `structuredContent.evidence` ([`EVIDENCE_FIELD`]); each output
//! file's text travels beside it as an MCP embedded-resource content block whose URI is
//! [`evidence_file_uri`] of the file's SHA-256, so the model (which reads the structured content)
//! never has the files in its context while the recorder can check every file against its hash.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::tools::ToolOutput;

/// The key of the evidence in a tool result's structured content.
pub const EVIDENCE_FIELD: &str = "evidence";
/// The key under which a recorder answers where it put the evidence (added to the result the
/// model reads: `recorded.node_id`, `recorded.artifact`).
pub const RECORDED_FIELD: &str = "recorded";
/// The URI scheme of an evidence file's embedded resource.
pub const EVIDENCE_FILE_SCHEME: &str = "metaforge-evidence";

/// What a quantity measures: the label of numeric grounding and the dimension its unit must
/// have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuantityKind {
    /// A mechanical stress (Pa, kPa, MPa, GPa).
    Stress,
    /// A displacement or deflection (m, mm, µm).
    Displacement,
    /// A force (N, kN).
    Force,
    /// A mass (kg, g).
    Mass,
    /// A safety factor against yield (no unit).
    SafetyFactor,
    /// An electric potential (V, mV).
    Voltage,
    /// An electric current (A, mA, µA).
    Current,
    /// A frequency (Hz, kHz, MHz).
    Frequency,
    /// A time (s, ms, µs, ns).
    Time,
    /// A ratio in decibels (dB).
    Gain,
}

impl QuantityKind {
    /// Every kind.
    pub const ALL: [Self; 10] = [
        Self::Stress,
        Self::Displacement,
        Self::Force,
        Self::Mass,
        Self::SafetyFactor,
        Self::Voltage,
        Self::Current,
        Self::Frequency,
        Self::Time,
        Self::Gain,
    ];

    /// The name as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stress => "stress",
            Self::Displacement => "displacement",
            Self::Force => "force",
            Self::Mass => "mass",
            Self::SafetyFactor => "safety_factor",
            Self::Voltage => "voltage",
            Self::Current => "current",
            Self::Frequency => "frequency",
            Self::Time => "time",
            Self::Gain => "gain",
        }
    }
}

/// One computed number with its unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quantity {
    /// What it is (`max_von_mises_stress`, `v(out)`, `minus_3db_frequency(out)`).
    pub name: String,
    /// What it measures.
    pub kind: QuantityKind,
    /// The value in `unit`.
    pub value: f64,
    /// The unit as written (`MPa`, `mm`, `V`; empty for a safety factor).
    pub unit: String,
}

/// A program that took part, with the version it reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramVersion {
    /// `ngspice`, `gmsh`, `calculix`.
    pub name: String,
    /// As the program printed it.
    pub version: String,
}

/// The sandbox every program run of the call had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxReport {
    /// False only when the server's entry turned its sandbox off.
    pub sandboxed: bool,
    /// CPU seconds.
    pub cpu_seconds: u64,
    /// Address space, MiB.
    pub memory_mb: u64,
    /// Largest file, MiB.
    pub file_size_mb: u64,
    /// Wall time per program run, seconds.
    pub wall_seconds: u64,
}

/// An output file: its name, type, size and hash (its text travels as an embedded resource).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceFile {
    /// The file's name as the program wrote it (`job.dat`).
    pub name: String,
    /// Its media type (`text/plain`).
    pub media_type: String,
    /// The lower-case hex SHA-256 of its bytes.
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
}

/// What one tool call computed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolEvidence {
    /// The tool (`fea.static`, `spice.ac`).
    pub tool: String,
    /// The deliverable it is evidence for (`simulation_result`).
    pub artifact: String,
    /// A human title (`Linear static analysis: box 100×10×10 mm, steel_s235`).
    pub title: String,
    /// The programs that computed it.
    pub programs: Vec<ProgramVersion>,
    /// The SHA-256 of the exact input the last program read.
    pub input_sha256: String,
    /// The sandbox it ran in.
    pub sandbox: SandboxReport,
    /// The numbers.
    pub quantities: Vec<Quantity>,
    /// The output files, in the order the tool lists them.
    pub files: Vec<EvidenceFile>,
}

/// The URI of an evidence file's embedded resource: `metaforge-evidence://sha256/<hex>/<name>`.
pub fn evidence_file_uri(file: &EvidenceFile) -> String {
    format!("{EVIDENCE_FILE_SCHEME}://sha256/{}/{}", file.sha256, file.name)
}

/// An output file and its text, as a tool builds its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileText {
    /// The file's name.
    pub name: String,
    /// Its media type.
    pub media_type: String,
    /// Its text.
    pub text: String,
}

impl FileText {
    /// The file's entry in the evidence (hash and size of `text`).
    pub fn entry(&self) -> EvidenceFile {
        EvidenceFile {
            name: self.name.clone(),
            media_type: self.media_type.clone(),
            sha256: crate::sha256_hex(&self.text),
            bytes: self.text.len() as u64,
        }
    }
}

impl ToolOutput {
    /// A successful result: `value` with `evidence` under [`EVIDENCE_FIELD`], each of `files`'
    /// text as an embedded resource beside the JSON text block (a file the evidence lists but
    /// `files` leaves out — one too large to carry — is named with its hash only).
    pub fn with_evidence(mut value: Value, evidence: &ToolEvidence, files: &[FileText]) -> Self {
        if let Value::Object(map) = &mut value {
            map.insert(EVIDENCE_FIELD.to_owned(), json!(evidence));
        }
        let mut output = Self::json(value);
        for file in files {
            output.content.push(json!({
                "type": "resource",
                "resource": {"uri": evidence_file_uri(&file.entry()), "mimeType": file.media_type, "text": file.text},
            }));
        }
        output
    }

    /// The evidence a successful result carries, if any (a malformed one is `Err` naming why).
    pub fn evidence(&self) -> Option<Result<ToolEvidence, serde_json::Error>> {
        if self.is_error {
            return None;
        }
        let value = self.structured.as_ref()?.get(EVIDENCE_FIELD)?;
        Some(serde_json::from_value(value.clone()))
    }

    /// The text of the evidence file `file`, found by its URI; `None` when absent or when the
    /// text's hash is not the file's.
    pub fn evidence_file_text(&self, file: &EvidenceFile) -> Option<&str> {
        let uri = evidence_file_uri(file);
        self.content
            .iter()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("resource"))
            .filter_map(|block| block.get("resource"))
            .find(|resource| resource.get("uri").and_then(Value::as_str) == Some(uri.as_str()))
            .and_then(|resource| resource.get("text").and_then(Value::as_str))
            .filter(|text| crate::sha256_hex(text) == file.sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(files: Vec<EvidenceFile>) -> ToolEvidence {
        ToolEvidence {
            tool: "fea.static".to_owned(),
            artifact: "simulation_result".to_owned(),
            title: "cantilever".to_owned(),
            programs: vec![ProgramVersion {
                name: "calculix".to_owned(),
                version: "2.20".to_owned(),
            }],
            input_sha256: "ab".repeat(32),
            sandbox: SandboxReport {
                sandboxed: true,
                cpu_seconds: 60,
                memory_mb: 2048,
                file_size_mb: 256,
                wall_seconds: 120,
            },
            quantities: vec![Quantity {
                name: "max_von_mises_stress".to_owned(),
                kind: QuantityKind::Stress,
                value: 59.5,
                unit: "MPa".to_owned(),
            }],
            files,
        }
    }

    #[test]
    fn evidence_and_its_files_round_trip_through_a_tool_output() {
        let dat = FileText {
            name: "job.dat".to_owned(),
            media_type: "text/plain".to_owned(),
            text: "displacements\n 1 0.0 0.0 -0.19\n".to_owned(),
        };
        let evidence = evidence(vec![dat.entry()]);
        let output = ToolOutput::with_evidence(
            json!({"max_von_mises_mpa": 59.5}),
            &evidence,
            std::slice::from_ref(&dat),
        );
        let read = output.evidence().and_then(Result::ok);
        assert_eq!(read.as_ref(), Some(&evidence));
        assert_eq!(
            output.evidence_file_text(&evidence.files[0]),
            Some(dat.text.as_str())
        );
        assert_eq!(
            output.structured.as_ref().map(|s| s["max_von_mises_mpa"].clone()),
            Some(json!(59.5))
        );
    }

    #[test]
    fn a_file_whose_text_does_not_match_its_hash_is_not_handed_out() {
        let dat = FileText {
            name: "job.dat".to_owned(),
            media_type: "text/plain".to_owned(),
            text: "real".to_owned(),
        };
        let mut entry = dat.entry();
        let output = ToolOutput::with_evidence(json!({}), &evidence(vec![entry.clone()]), &[dat]);
        entry.sha256 = "00".repeat(32);
        assert_eq!(output.evidence_file_text(&entry), None);
    }

    #[test]
    fn an_error_result_carries_no_evidence() {
        let mut output = ToolOutput::json(json!({"evidence": {}}));
        output.is_error = true;
        assert!(output.evidence().is_none());
        assert!(ToolOutput::json(json!({"x": 1})).evidence().is_none());
        assert!(matches!(
            ToolOutput::json(json!({"evidence": {"tool": 1}})).evidence(),
            Some(Err(_))
        ));
    }
}
