//! The Skills extension on the sidecar (SEP-2640, `io.modelcontextprotocol/skills`): the host's
//! skills as `skill://<name>/<path>` resources, `skills/list` and `skills/get` with a digest per
//! file. Only text files are served (a binary file would need a second encoding path for no
//! skill MetaForge has); the manifest lists exactly what `resources/read` answers, so every
//! digest can be checked.

use metaforge_ports::ServedSkill;
use rmcp::model::{
    ReadResourceResult, Resource, ResourceContents, ServerCapabilities, Skill, SkillFrontmatter,
    SkillResource, SkillResources,
};

/// The URI scheme of skill files.
const SCHEME: &str = "skill://";
/// The manifest's MIME type.
const MARKDOWN: &str = "text/markdown";

fn uri(skill: &str, path: &str) -> String {
    format!("{SCHEME}{skill}/{path}")
}

/// The files of `skill` that are served: those whose bytes are text.
fn text_files(skill: &ServedSkill) -> impl Iterator<Item = (&str, &str)> {
    skill
        .files
        .iter()
        .filter_map(|(path, bytes)| std::str::from_utf8(bytes).ok().map(|text| (path.as_str(), text)))
}

fn mime_of(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("md") => MARKDOWN,
        Some("json") => "application/json",
        Some("yaml" | "yml") => "application/yaml",
        Some("py") => "text/x-python",
        Some("sh") => "text/x-shellscript",
        _ => "text/plain",
    }
}

/// Declares the extension (empty settings: no directory reads) when there are skills.
pub(crate) fn declare(capabilities: &mut ServerCapabilities, skills: &[ServedSkill]) {
    if skills.is_empty() {
        return;
    }
    capabilities
        .extensions
        .get_or_insert_with(Default::default)
        .insert(
            rmcp::model::SKILLS_EXTENSION_ID.to_owned(),
            serde_json::Map::new(),
        );
}

/// One skill as `skills/list` and `skills/get` give it.
pub(crate) fn entry(skill: &ServedSkill) -> Skill {
    let mut frontmatter = SkillFrontmatter::new(&skill.name, &skill.description);
    for (key, value) in &skill.frontmatter {
        if key != "name" && key != "description" {
            frontmatter = frontmatter.with_field(key.clone(), value.clone());
        }
    }
    let mut files: Vec<SkillResource> = text_files(skill)
        .map(|(path, text)| SkillResource::from_bytes(uri(&skill.name, path), text.as_bytes()))
        .collect();
    files.sort_by(|a, b| a.uri.cmp(&b.uri));
    Skill::new(
        uri(&skill.name, metaforge_ports::SKILL_MANIFEST),
        frontmatter,
        SkillResources::Files(files),
    )
}

/// Every skill's `SKILL.md`, for `resources/list`.
pub(crate) fn listed(skills: &[ServedSkill]) -> Vec<Resource> {
    skills
        .iter()
        .filter_map(|skill| {
            let (_, manifest) = text_files(skill).find(|(p, _)| *p == metaforge_ports::SKILL_MANIFEST)?;
            Some(
                Resource::new(uri(&skill.name, metaforge_ports::SKILL_MANIFEST), &skill.name)
                    .with_description(&skill.description)
                    .with_mime_type(MARKDOWN)
                    .with_size(manifest.len() as u64),
            )
        })
        .collect()
}

/// `resources/read` of a skill file, or `None` when `uri` is not one this host serves.
pub(crate) fn read(skills: &[ServedSkill], wanted: &str) -> Option<ReadResourceResult> {
    let rest = wanted.strip_prefix(SCHEME)?;
    let (name, path) = rest.split_once('/')?;
    let skill = skills.iter().find(|s| s.name == name)?;
    let (path, text) = text_files(skill).find(|(p, _)| *p == path)?;
    Some(ReadResourceResult::new(vec![
        ResourceContents::text(text, wanted).with_mime_type(mime_of(path)),
    ]))
}
