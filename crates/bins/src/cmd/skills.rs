//! `metaforge skills list | show NAME | validate PATH | new NAME`: the skill catalogue from the
//! command line (issue 19). `validate` checks one skill directory (or its `SKILL.md`) with the
//! same rule the loader uses: exit 0 valid, 1 invalid (each problem as `file:line: message`),
//! 2 when the path cannot be read.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use metaforge_domain::skill::{SKILL_FILE, name_problem, parse_skill};

use crate::settings::Settings;
use metaforge_adapters_store::skill_dirs::{DiskSkills, read_skill};
use metaforge_app::skills::catalog;

/// The skills subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum SkillsCommand {
    /// Every skill on offer (bundled, then `$METAFORGE_HOME/skills`, then `METAFORGE_SKILLS_DIRS`),
    /// with where it came from; refused skills after, with their problems.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One skill: its frontmatter, its files and its instructions.
    Show {
        /// The skill's name.
        name: String,
    },
    /// Check a skill directory (or its SKILL.md) against the Agent Skills rules.
    Validate {
        /// The skill directory, or its SKILL.md.
        path: PathBuf,
    },
    /// Start a new skill: `NAME/SKILL.md` with the frontmatter filled in.
    New {
        /// Its name: lowercase letters, digits and single hyphens.
        name: String,
        /// Where to create it (default `$METAFORGE_HOME/skills`).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn home(settings: &Settings) -> anyhow::Result<PathBuf> {
    settings.store().map(|p| p.home.clone())
}

fn skill_directories(settings: &Settings) -> anyhow::Result<DiskSkills> {
    Ok(DiskSkills::of_home(
        &home(settings)?,
        settings.skills_dirs.as_deref(),
    ))
}

/// Runs a skills subcommand.
pub(crate) fn run(command: &SkillsCommand, settings: &Settings) -> ExitCode {
    match command {
        SkillsCommand::List { json } => list(*json, settings),
        SkillsCommand::Show { name } => show(name, settings),
        SkillsCommand::Validate { path } => validate(path),
        SkillsCommand::New { name, dir } => new(name, dir.as_deref(), settings),
    }
}

fn loaded(settings: &Settings) -> Result<metaforge_app::skills::SkillCatalog, ExitCode> {
    let directories = skill_directories(settings).map_err(|e| {
        eprintln!("metaforge skills: {e}");
        ExitCode::from(2)
    })?;
    catalog(&directories).map_err(|e| {
        eprintln!("metaforge skills: {e}");
        ExitCode::from(2)
    })
}

fn list(json: bool, settings: &Settings) -> ExitCode {
    let catalog = match loaded(settings) {
        Ok(catalog) => catalog,
        Err(code) => return code,
    };
    if json {
        match serde_json::to_string_pretty(&catalog) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("metaforge skills: {e}");
                return ExitCode::FAILURE;
            }
        }
        return ExitCode::SUCCESS;
    }
    let width = catalog.skills.keys().map(String::len).max().unwrap_or(4).max(4);
    println!("{:width$}  {:8}  {:7}  DESCRIPTION", "NAME", "ORIGIN", "COMMITS");
    for (name, skill) in &catalog.skills {
        let origin = match &skill.origin {
            metaforge_app::skills::SkillOrigin::Bundled => "bundled".to_owned(),
            metaforge_app::skills::SkillOrigin::Directory(_) => "local".to_owned(),
            metaforge_app::skills::SkillOrigin::Server(name) => name.clone(),
        };
        let mut description: String = skill.skill.description.chars().take(90).collect();
        if skill.skill.description.chars().count() > 90 {
            description.push('…');
        }
        let commits = if skill.skill.commits() { "yes" } else { "no" };
        println!("{name:width$}  {origin:8}  {commits:7}  {description}");
    }
    for replaced in &catalog.overridden {
        println!(
            "# {} from {} replaces the one from {}",
            replaced.name,
            replaced.by.label(),
            replaced.replaced.label()
        );
    }
    for refused in &catalog.refused {
        println!("# refused {} ({}):", refused.directory, refused.origin.label());
        for problem in &refused.problems {
            println!("#   {problem}");
        }
    }
    ExitCode::SUCCESS
}

fn show(name: &str, settings: &Settings) -> ExitCode {
    let catalog = match loaded(settings) {
        Ok(catalog) => catalog,
        Err(code) => return code,
    };
    let Some(skill) = catalog.get(name) else {
        let known: Vec<&str> = catalog.skills.keys().map(String::as_str).collect();
        eprintln!(
            "metaforge skills show: no skill '{name}' (known: {})",
            known.join(", ")
        );
        return ExitCode::from(2);
    };
    println!("name: {}", skill.skill.name);
    println!("origin: {}", skill.origin.label());
    println!("description: {}", skill.skill.description);
    if let Some(license) = &skill.skill.license {
        println!("license: {license}");
    }
    if let Some(compatibility) = &skill.skill.compatibility {
        println!("compatibility: {compatibility}");
    }
    if !skill.skill.allowed_tools.is_empty() {
        println!("allowed-tools: {}", skill.skill.allowed_tools.join(" "));
    }
    println!(
        "commits: {}",
        if skill.skill.commits() {
            "yes (held for approval)"
        } else {
            "no"
        }
    );
    for (key, value) in &skill.skill.metadata {
        println!("metadata.{key}: {value}");
    }
    for file in &skill.files {
        println!("file: {file}");
    }
    println!("\n{}", skill.skill.body);
    ExitCode::SUCCESS
}

fn validate(path: &Path) -> ExitCode {
    let dir = if path.file_name().is_some_and(|n| n == SKILL_FILE) {
        path.parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    } else {
        path.to_owned()
    };
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    if !dir.join(SKILL_FILE).is_file() {
        eprintln!(
            "metaforge skills validate: {}: no {SKILL_FILE} there",
            dir.display()
        );
        return ExitCode::from(2);
    }
    let files = match read_skill(&dir) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("metaforge skills validate: {e}");
            return ExitCode::from(2);
        }
    };
    let file = dir.join(SKILL_FILE);
    match parse_skill(&files.directory, &files.skill_md) {
        Ok(skill) => {
            println!("valid skill: {} ({} other files)", skill.name, files.files.len());
            ExitCode::SUCCESS
        }
        Err(problems) => {
            for problem in problems {
                match problem.line {
                    Some(line) => eprintln!("{}:{line}: {}", file.display(), problem.message),
                    None => eprintln!("{}: {}", file.display(), problem.message),
                }
            }
            ExitCode::from(1)
        }
    }
}

fn new(name: &str, dir: Option<&Path>, settings: &Settings) -> ExitCode {
    if let Some(why) = name_problem(name) {
        eprintln!("metaforge skills new: the name {why}");
        return ExitCode::from(2);
    }
    let root = match dir {
        Some(dir) => dir.to_owned(),
        None => match home(settings) {
            Ok(home) => home.join("skills"),
            Err(e) => {
                eprintln!("metaforge skills new: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let target = root.join(name);
    if target.exists() {
        eprintln!(
            "metaforge skills new: {} exists already; nothing was written",
            target.display()
        );
        return ExitCode::from(2);
    }
    let text = format!(
        "---\nname: {name}\ndescription: Say what this skill does and when to use it (the model sees only this before activating it).\nmetadata:\n  metaforge-commits: \"false\"\n---\n\n# {name}\n\nThe steps, one per line, naming the tools to call.\n"
    );
    if let Err(e) =
        std::fs::create_dir_all(&target).and_then(|()| std::fs::write(target.join(SKILL_FILE), text))
    {
        eprintln!("metaforge skills new: {}: {e}", target.display());
        return ExitCode::from(2);
    }
    println!("created {}", target.join(SKILL_FILE).display());
    ExitCode::SUCCESS
}
