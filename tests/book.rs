//! The book under `docs/`, as far as it can be checked without mdBook (CI also builds it, with
//! the mdBook version `.ci/run` installs, and runs the link checker on the result):
//!
//! - every recipe in `examples/` is shown by a recipe page through mdBook's include directive,
//!   so that the page is the very file the recipe tests run, never a copy that can drift;
//! - every file a page includes and every image it shows exists, since mdBook only logs a
//!   missing include and goes on;
//! - every page is in `SUMMARY.md` and every entry there is a page (`create-missing` is off);
//! - every diagram is an SVG with its text source beside it in `docs/diagrams/`, shown by a
//!   page;
//! - the HTTP API page has one `### METHOD /path {#anchor}` heading per route, the regular
//!   shape that lets a test compare it with the server's routes;
//! - `scripts/check-book-links` finds each kind of broken link it exists to find, on a small
//!   built book planted with them, and passes a sound one: a checker that found nothing would
//!   let CI pass vacuously.

#![allow(clippy::too_many_lines)] // Tables, one row a case: long by design.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn src() -> PathBuf {
    root().join("docs/src")
}

/// Every Markdown page under `docs/src`, as paths relative to it, sorted.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, base: &Path, found: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("read a folder of docs/src") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                walk(&path, base, found);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                found.push(path.strip_prefix(base).expect("under docs/src").to_owned());
            }
        }
    }
    let mut found = Vec::new();
    walk(&src(), &src(), &mut found);
    found.sort();
    found
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

/// The targets of `{{#include PATH}}` (or `{{#include PATH:anchor}}`) in `text`.
fn includes(text: &str) -> Vec<String> {
    text.split("{{#include ")
        .skip(1)
        .map(|rest| {
            let target = rest.split("}}").next().unwrap_or_default().trim();
            target.split(':').next().unwrap_or_default().to_owned()
        })
        .collect()
}

/// The targets of Markdown links and images, `](TARGET)`, in `text`.
fn link_targets(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_recipe_in_examples_is_included_by_a_recipe_page() {
    let mut shown = BTreeSet::new();
    for page in pages().iter().filter(|page| page.starts_with("recipes")) {
        for target in includes(&read(&src().join(page))) {
            if let Some(name) = target.strip_prefix("../../../examples/") {
                shown.insert(name.to_owned());
            }
        }
    }
    let mut recipes = BTreeSet::new();
    for entry in fs::read_dir(root().join("examples")).expect("examples/") {
        let entry = entry.expect("an entry of examples/");
        recipes.insert(entry.file_name().to_string_lossy().into_owned());
    }
    let missing: Vec<_> = recipes.difference(&shown).collect();
    assert!(
        missing.is_empty(),
        "recipes that no page under docs/src/recipes/ includes: {missing:?}"
    );
}

#[test]
fn every_include_and_image_of_the_book_exists() {
    let mut problems = Vec::new();
    for page in pages() {
        let path = src().join(&page);
        let folder = path.parent().expect("a page's folder").to_owned();
        let text = read(&path);
        for target in includes(&text) {
            if !folder.join(&target).is_file() {
                problems.push(format!(
                    "{}: includes {target}, which does not exist",
                    page.display()
                ));
            }
        }
        for target in link_targets(&text) {
            let file = target.split('#').next().unwrap_or_default();
            let local = !target.contains("://") && !target.starts_with("mailto:");
            if local && !file.is_empty() && !folder.join(file).exists() {
                problems.push(format!(
                    "{}: links to {target}, which does not exist",
                    page.display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_page_is_in_the_summary_and_every_entry_is_a_page() {
    let summary = read(&src().join("SUMMARY.md"));
    let listed: BTreeSet<PathBuf> = link_targets(&summary)
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let present: BTreeSet<PathBuf> = pages()
        .into_iter()
        .filter(|page| page != Path::new("SUMMARY.md"))
        .collect();
    let unlisted: Vec<_> = present.difference(&listed).collect();
    let absent: Vec<_> = listed.difference(&present).collect();
    assert!(
        unlisted.is_empty(),
        "pages missing from SUMMARY.md: {unlisted:?}"
    );
    assert!(
        absent.is_empty(),
        "SUMMARY.md entries with no page: {absent:?}"
    );
}

#[test]
fn every_diagram_is_an_svg_made_from_a_source_and_shown_by_a_page() {
    let names = |dir: &str, ext: &str| -> BTreeSet<String> {
        fs::read_dir(root().join(dir))
            .unwrap_or_else(|err| panic!("read {dir}: {err}"))
            .map(|entry| entry.expect("an entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == ext))
            .map(|path| {
                path.file_stem()
                    .expect("a name")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    };
    let sources = names("docs/diagrams", "bob");
    let images = names("docs/src/images", "svg");
    assert!(!sources.is_empty(), "no diagram sources in docs/diagrams/");
    assert_eq!(
        sources, images,
        "each docs/diagrams/NAME.bob is rendered to docs/src/images/NAME.svg by scripts/diagrams"
    );
    let book: String = pages().iter().map(|page| read(&src().join(page))).collect();
    for name in &images {
        assert!(
            book.contains(&format!("images/{name}.svg")),
            "no page shows images/{name}.svg"
        );
        let svg = read(&root().join(format!("docs/src/images/{name}.svg")));
        assert!(svg.starts_with("<svg"), "images/{name}.svg is not an SVG");
    }
}

#[test]
fn the_http_api_page_has_one_method_and_path_heading_per_route() {
    let page = read(&src().join("http-api.md"));
    let routes = page
        .split("\n## Routes")
        .nth(1)
        .expect("a ## Routes section in http-api.md");
    let headings: Vec<&str> = routes
        .lines()
        .filter(|line| line.starts_with("### "))
        .collect();
    assert!(!headings.is_empty(), "no route headings in http-api.md");
    let methods = ["GET", "POST", "PUT", "PATCH", "DELETE"];
    let mut anchors = BTreeSet::new();
    for heading in &headings {
        let words: Vec<&str> = heading.split(' ').collect();
        let well_formed = words.len() == 4
            && methods.contains(&words[1])
            && words[2].starts_with('/')
            && words[3].starts_with("{#")
            && words[3].ends_with('}');
        assert!(
            well_formed,
            "a route heading is `### METHOD /path {{#anchor}}`: {heading}"
        );
        assert!(
            anchors.insert(words[3]),
            "two routes share the anchor of {heading}"
        );
    }
}

/// Runs the link checker on `book`; returns its exit code and its output.
fn check_links(book: &Path) -> (i32, String) {
    let output = Command::new("python3")
        .arg(root().join("scripts/check-book-links"))
        .arg(book)
        .output()
        .expect("python3 runs scripts/check-book-links");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code().expect("an exit code"), text)
}

/// An HTML page of a built book: a stylesheet (linked from the page's `folder`) and `body`.
fn page(folder: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html><html><head><link rel=\"stylesheet\" href=\"{folder}css/book.css\">\
         </head><body>{body}</body></html>"
    )
}

#[test]
fn the_link_checker_finds_every_kind_of_broken_link_and_passes_a_sound_book() {
    let book = tempfile::tempdir().expect("a scratch folder");
    let write = |name: &str, text: &str| {
        let path = book.path().join(name);
        fs::create_dir_all(path.parent().expect("a folder")).expect("make the folder");
        fs::write(path, text).expect("write a page");
    };
    write("css/book.css", "body {}");
    write("images/lease.svg", "<svg/>");
    write(
        "index.html",
        &page(
            "",
            "<h1 id=\"top\">distlock</h1><a href=\"guide/run.html\">run</a>",
        ),
    );
    write(
        "guide/run.html",
        &page(
            "../",
            "<h1 id=\"run\">run</h1><h2 id=\"signals\">Signals</h2>\
             <a href=\"#signals\">here</a> <a href=\"../index.html#top\">up</a> \
             <a href=\"../reference/\">the reference</a> <img src=\"../images/lease.svg\"> \
             <a href=\"https://example.invalid/x#y\">out</a> <a href=\"mailto:a@b.invalid\">mail</a>",
        ),
    );
    write(
        "reference/index.html",
        &page("../", "<h1 id=\"reference\">Reference</h1>"),
    );
    // The sound book passes.
    let (code, text) = check_links(book.path());
    assert_eq!(code, 0, "a sound book passes: {text}");
    assert!(text.contains(", 0 broken"), "{text}");

    // Each kind of broken link, planted once, is named.
    write(
        "guide/broken.html",
        &page(
            "../",
            "<h1 id=\"broken\">Broken</h1>\
             <a href=\"missing.html\">a page that is not there</a>\
             <a href=\"run.html#no-such-anchor\">an anchor that is not there</a>\
             <a href=\"#nowhere\">an anchor of this page that is not there</a>\
             <img src=\"../images/gone.svg\">\
             <a href=\"/reference/index.html\">an absolute path</a>\
             <a href=\"../../outside.html\">a file outside the book</a>\
             <p>{{#include ../../../examples/gone}}</p>",
        ),
    );
    let (code, text) = check_links(book.path());
    assert_eq!(code, 1, "a broken book fails: {text}");
    for expected in [
        "guide/broken.html: missing.html: no such file in the book",
        "guide/broken.html: run.html#no-such-anchor: guide/run.html has no #no-such-anchor",
        "guide/broken.html: #nowhere: guide/broken.html has no #nowhere",
        "guide/broken.html: ../images/gone.svg: no such file in the book",
        "guide/broken.html: /reference/index.html: an absolute path",
        "guide/broken.html: ../../outside.html: no such file in the book",
        "guide/broken.html: {{#include ../../../examples/gone}}: an mdBook directive left unexpanded",
        ", 7 broken",
    ] {
        assert!(
            text.contains(expected),
            "the checker says {expected:?}:\n{text}"
        );
    }
    assert!(
        !text.contains("guide/run.html:"),
        "the sound page is not blamed:\n{text}"
    );
}

#[test]
fn the_link_checker_refuses_a_folder_without_a_built_book() {
    let empty = tempfile::tempdir().expect("a scratch folder");
    let (code, text) = check_links(empty.path());
    assert_eq!(code, 66, "{text}");
    assert!(text.contains("no built book"), "{text}");
}
