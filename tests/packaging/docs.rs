//! The manual (`docs/`, an mdBook) and the README, checked as files.
//!
//! - `docs-links`: every relative link and image in `README.md` and `docs/src/**/*.md` names a
//!   file that exists, every `#anchor` into a Markdown file names one of its headings (slugs as
//!   GitHub and mdBook make them), a page of the book links nowhere outside the book's sources
//!   (the rendered book would not have it), and `docs/src/SUMMARY.md` lists every page.
//!
//! Links to other sites are not fetched. `tools/test` builds the book itself (`mdbook build`),
//! which does not fail on a broken link: this trial does.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, ensure};
use libtest_mimic::Trial;

pub fn trials() -> Vec<Trial> {
    vec![Trial::test("docs-links", || {
        links_resolve_and_summary_lists_every_page().map_err(|e| format!("{e:#}").into())
    })]
}

const BOOK_SRC: &str = "docs/src";

fn links_resolve_and_summary_lists_every_page() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let book = root.join(BOOK_SRC);
    let mut pages = Vec::new();
    markdown_files(&book, &mut pages)?;
    pages.sort();
    ensure!(!pages.is_empty(), "no Markdown page under {BOOK_SRC}");

    let mut broken = Vec::new();
    for file in std::iter::once(root.join("README.md")).chain(pages.iter().cloned()) {
        let text = read(&file)?;
        let shown = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        for (line, target) in links(&text) {
            if let Err(why) = check_link(&file, &book, &target) {
                broken.push(format!("{shown}:{line}: ({target}) {why}"));
            }
        }
    }

    let summary = book.join("SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&read(&summary)?)
        .into_iter()
        .filter_map(|(_, target)| {
            split_target(&target).map(|(path, _)| normalize(&book.join(path)))
        })
        .collect();
    for page in &pages {
        if *page != summary && !listed.contains(&normalize(page)) {
            let shown = page.strip_prefix(root).unwrap_or(page).display();
            broken.push(format!("{shown}: not listed in {BOOK_SRC}/SUMMARY.md"));
        }
    }

    ensure!(broken.is_empty(), "{} broken link(s):\n{}", broken.len(), broken.join("\n"));
    Ok(())
}

/// Why a link from `file` is broken, if it is.
fn check_link(file: &Path, book: &Path, target: &str) -> Result<(), String> {
    let Some((path, anchor)) = split_target(target) else {
        return Ok(()); // another site, or mail
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    let resolved = if path.is_empty() { file.to_path_buf() } else { normalize(&dir.join(path)) };
    if file.starts_with(book) && !resolved.starts_with(normalize(book)) {
        return Err(format!(
            "leaves the book's sources ({BOOK_SRC}): the rendered book has no such page"
        ));
    }
    if !resolved.exists() {
        return Err(format!("no such file: {}", resolved.display()));
    }
    if let Some(anchor) = anchor
        && resolved.extension().is_some_and(|e| e == "md")
    {
        let text = std::fs::read_to_string(&resolved).map_err(|e| e.to_string())?;
        if !heading_slugs(&text).contains(anchor) {
            return Err(format!("no heading #{anchor} in {}", resolved.display()));
        }
    }
    Ok(())
}

/// A relative link's path and anchor; `None` for a link to another site (`https:`, `mailto:`).
fn split_target(target: &str) -> Option<(&str, Option<&str>)> {
    let scheme = target.split_once(':').is_some_and(|(s, _)| {
        !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    if scheme {
        return None;
    }
    Some(match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    })
}

/// Every inline link and image target, with its line number, outside fenced code blocks and
/// code spans.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            if !target.is_empty() {
                found.push((n, target.to_string()));
            }
            rest = &rest[end..];
        }
    }
    found
}

/// The slugs of every ATX heading, as GitHub and mdBook make them: the heading's text (code
/// spans and links reduced to their text), lower case, letters, digits, `-` and `_` kept, spaces
/// made `-`, everything else dropped; a repeated slug gets `-1`, `-2`, ...
fn heading_slugs(text: &str) -> BTreeSet<String> {
    let mut slugs = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let trimmed = line.trim_start();
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !trimmed[hashes..].starts_with(' ') {
            continue;
        }
        let title = link_texts(trimmed[hashes..].trim().trim_end_matches('#').trim());
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while slugs.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        slugs.insert(unique);
    }
    slugs
}

/// `[text](target)` reduced to `text`.
fn link_texts(title: &str) -> String {
    let mut out = String::new();
    let mut rest = title;
    while let Some(at) = rest.find("](") {
        out.push_str(&rest[..at]);
        rest = &rest[at + 2..];
        rest = rest.find(')').map_or("", |end| &rest[end + 1..]);
    }
    out.push_str(rest);
    out.replace('[', "")
}

/// The lines outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter_map(move |(i, line)| {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
            return None;
        }
        (!fenced).then_some((i + 1, line))
    })
}

/// The line with its code spans (`` `...` ``) removed.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(open) = rest.find('`') {
        out.push_str(&rest[..open]);
        let ticks = rest[open..].chars().take_while(|&c| c == '`').count();
        let after = &rest[open + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(close) => rest = &after[close + ticks..],
            None => {
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            markdown_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    Ok(())
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}
