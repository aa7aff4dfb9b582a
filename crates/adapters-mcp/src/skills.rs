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

/// The largest skill file a client reads from a server (a larger one is left out).
const MAX_REMOTE_FILE_BYTES: u64 = 1024 * 1024;

/// Reads every skill `peer` serves: the entries of `skills/list`, each text file read with
/// `resources/read` and checked against the manifest's size and digest. A file that fails the
/// check is an error naming it (a skill is never taken half-verified).
pub(crate) async fn fetch(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    server: &str,
) -> Result<Vec<ServedSkill>, metaforge_ports::PortError> {
    use metaforge_ports::{PortError, PortErrorKind};
    let declared = peer
        .peer_info()
        .is_some_and(|info| info.capabilities.supports_skills());
    if !declared {
        return Ok(Vec::new());
    }
    let failed =
        |what: String| PortError::new(PortErrorKind::Unavailable, format!("mcp server {server}: {what}"));
    let entries = peer
        .list_all_skills()
        .await
        .map_err(|e| failed(format!("skills/list failed: {e}")))?;
    let mut skills = Vec::new();
    for entry in entries {
        let name = entry.frontmatter.name.clone();
        let prefix = format!("{SCHEME}{name}/");
        let SkillResources::Files(resources) = &entry.resources else {
            tracing::warn!(event = "mcp_skill_dynamic_skipped", server, skill = %name, "a skill with dynamic resources is not taken");
            continue;
        };
        let mut files = Vec::new();
        for resource in resources {
            if resource.size > MAX_REMOTE_FILE_BYTES {
                continue;
            }
            let Some(path) = resource.uri.strip_prefix(&prefix) else {
                continue;
            };
            let read = peer
                .read_resource(rmcp::model::ReadResourceRequestParams::new(resource.uri.clone()))
                .await
                .map_err(|e| failed(format!("resources/read {}: {e}", resource.uri)))?;
            // A binary file is not taken (the host serves text only).
            let text = read.contents.iter().find_map(|c| {
                if let ResourceContents::TextResourceContents { text, .. } = c {
                    Some(text.clone())
                } else {
                    None
                }
            });
            let Some(text) = text else {
                continue;
            };
            resource
                .verify(text.as_bytes())
                .map_err(|e| failed(format!("skill {name}: {e}")))?;
            files.push((path.to_owned(), text.into_bytes()));
        }
        files.sort_by_key(|(path, _)| path != metaforge_ports::SKILL_MANIFEST);
        let mut frontmatter = entry.frontmatter.extra.clone();
        frontmatter.insert("name".into(), serde_json::Value::String(name.clone()));
        frontmatter.insert(
            "description".into(),
            serde_json::Value::String(entry.frontmatter.description.clone()),
        );
        skills.push(ServedSkill {
            name,
            description: entry.frontmatter.description.clone(),
            frontmatter,
            files,
        });
    }
    Ok(skills)
}
