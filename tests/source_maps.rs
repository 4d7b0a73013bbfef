//! Each crate's source map (the `# Source map` section that ends its
//! `lib.rs` docs, the CLI's `main.rs`) against the files under its `src/`.
//!
//! The rules:
//!
//! - The map is the `//!` text from the `# Source map` heading to the next
//!   heading or the end of the crate docs. Every name in it ending in `.rs`
//!   (backticked or not, as a table, a list or a text block writes it) is a
//!   path relative to the crate's `src/`; a name ending in `/` (`event/`,
//!   `reconcile/`) names a folder, whose module docs map its files, and
//!   covers every file under it.
//! - Every `.rs` file under `src/` is named or under a named folder, except
//!   the file holding the map; and every name is a file or folder that
//!   exists. The test fails with both lists.
//! - A crate with no map is reported when its `src/` holds more than five
//!   `.rs` files besides the file the map would be in: up to five, the
//!   module list at the top of `lib.rs` is the map. The facade (`src/lib.rs`
//!   at the root) is held to the same rules.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The most `.rs` files (besides `lib.rs` or `main.rs`) a crate may have
/// without a source map.
const UNMAPPED_MAX: usize = 5;

/// Every `.rs` file under `dir`, relative to it, with `/` separators.
fn rust_files(dir: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, found: &mut BTreeSet<String>) {
        for entry in fs::read_dir(dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, found);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let relative = path.strip_prefix(root).unwrap();
                let parts: Vec<String> = relative
                    .components()
                    .map(|part| part.as_os_str().to_string_lossy().into_owned())
                    .collect();
                found.insert(parts.join("/"));
            }
        }
    }
    let mut found = BTreeSet::new();
    walk(dir, dir, &mut found);
    found
}

/// The `# Source map` section of a crate root's `//!` docs, if it has one.
fn source_map(root_file: &str) -> Option<String> {
    let mut section = None::<String>;
    for line in root_file.lines() {
        let Some(text) = line.strip_prefix("//!") else {
            if line.trim().is_empty() && section.is_none() {
                continue;
            }
            break;
        };
        let text = text.strip_prefix(' ').unwrap_or(text);
        match section.as_mut() {
            None if text.trim() == "# Source map" => section = Some(String::new()),
            None => {}
            Some(_) if text.starts_with("# ") => break,
            Some(section) => {
                section.push_str(text);
                section.push('\n');
            }
        }
    }
    section
}

/// The files (`….rs`) and folders (`…/`) a map names.
fn named_paths(map: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut files = BTreeSet::new();
    let mut folders = BTreeSet::new();
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    for word in map.split(|c: char| !is_path_char(c)) {
        let word = word.trim_start_matches("./");
        if word.ends_with(".rs") && word.len() > ".rs".len() {
            files.insert(word.to_owned());
        } else if word.ends_with('/')
            && word.len() > 1
            && word.split('/').filter(|part| !part.is_empty()).all(|part| {
                part.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
            && !word.contains("//")
        {
            folders.insert(word.to_owned());
        }
    }
    (files, folders)
}

/// What is wrong with one crate's map, if anything.
fn check_crate(crate_dir: &Path) -> Option<String> {
    let src = crate_dir.join("src");
    let root_name = ["lib.rs", "main.rs"]
        .into_iter()
        .find(|name| src.join(name).is_file())?;
    let root_file = fs::read_to_string(src.join(root_name)).unwrap();
    let mut files = rust_files(&src);
    files.remove(root_name);
    let Some(map) = source_map(&root_file) else {
        return (files.len() > UNMAPPED_MAX).then(|| {
            format!(
                "{}/src/{root_name} has no `# Source map` section, and src/ holds {} files besides it (more than {UNMAPPED_MAX})",
                crate_dir.display(),
                files.len()
            )
        });
    };
    let (named_files, named_folders) = named_paths(&map);
    let missing: Vec<&String> = files
        .iter()
        .filter(|file| !named_files.contains(*file))
        .filter(|file| {
            !named_folders
                .iter()
                .any(|folder| file.starts_with(folder.as_str()))
        })
        .collect();
    let gone: Vec<&String> = named_files
        .iter()
        .filter(|name| *name != root_name && !files.contains(*name))
        .chain(named_folders.iter().filter(|folder| !src.join(folder).is_dir()))
        .collect();
    (!missing.is_empty() || !gone.is_empty()).then(|| {
        format!(
            "{}/src/{root_name}'s source map\n  misses: {missing:?}\n  names what is not there: {gone:?}",
            crate_dir.display()
        )
    })
}

#[test]
fn every_source_map_names_exactly_the_files_of_its_crate() {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut crates: Vec<PathBuf> = fs::read_dir(workspace.join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    crates.push(workspace.clone());
    assert!(crates.len() > 5, "{crates:?}");
    let problems: Vec<String> = crates
        .iter()
        .filter_map(|crate_dir| check_crate(crate_dir))
        .map(|problem| problem.replace(&format!("{}/", workspace.display()), ""))
        .collect();
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn the_map_reader_finds_files_and_folders_in_every_form() {
    let root = "//! Crate docs.\n//!\n//! # Source map\n//!\n//! | `a.rs` | x |\n//! - `b/c.rs` — y, and `d/`\n//! ```text\n//! e.rs, f.rs   z (request/response)\n//! ```\n//!\n//! # Later\n//! `g.rs`\n";
    let map = source_map(root).unwrap();
    let (files, folders) = named_paths(&map);
    assert_eq!(
        files.into_iter().collect::<Vec<_>>(),
        ["a.rs", "b/c.rs", "e.rs", "f.rs"]
    );
    assert_eq!(folders.into_iter().collect::<Vec<_>>(), ["d/"]);
    assert!(source_map("//! No map.\n").is_none());
}
