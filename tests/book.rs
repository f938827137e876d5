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
//! - every route the server answers (the route names in `src/`, `"METHOD /path"`) has its
//!   heading on the HTTP API page, and every heading there is a route, so that a route cannot be
//!   added or changed without its page;
//! - `scripts/check-book-links` finds each kind of broken link it exists to find, on a small
//!   built book planted with them, and passes a sound one: a checker that found nothing would
//!   let CI pass vacuously.
//!
//! And the pages at the repository's root, which GitHub shows and the book links to:
//!
//! - every relative link of `README.md`, `BENCHMARKS.md`, `CONTRIBUTING.md` and `CHANGELOG.md`
//!   resolves to a file of the repository, and its `#anchor` to a heading of that file as GitHub
//!   names it (or an `id` in it);
//! - the README is at most 400 lines, names the cron recipe, the CI recipe and the exit codes in
//!   its first screenful (as the book's first page does), and each of its recipe excerpts is
//!   lines of the file it is marked as coming from.

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

/// The route names the server's code gives its routes: every string literal that is exactly
/// `"METHOD /path"` in the Rust sources under `src/`.
fn server_route_names() -> BTreeSet<String> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("read a folder of src/") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                found.push(path);
            }
        }
    }
    let methods = ["GET", "POST", "PUT", "PATCH", "DELETE"];
    let mut files = Vec::new();
    walk(&root().join("src"), &mut files);
    let mut names = BTreeSet::new();
    for file in files {
        let text = read(&file);
        // Between every second quote: a string literal, or the text between two of them; only
        // a literal is ever exactly "METHOD /path" with a path free of spaces and quotes.
        for piece in text.split('"') {
            let Some((method, path)) = piece.split_once(' ') else {
                continue;
            };
            let well_formed = methods.contains(&method)
                && path.starts_with('/')
                && !path.contains(|c: char| c.is_whitespace() || c == '\\');
            if well_formed {
                names.insert(format!("{method} {path}"));
            }
        }
    }
    names
}

#[test]
fn every_route_of_the_server_has_its_heading_on_the_http_api_page() {
    let page = read(&src().join("http-api.md"));
    let routes = page
        .split("\n## Routes")
        .nth(1)
        .expect("a ## Routes section in http-api.md");
    let documented: BTreeSet<String> = routes
        .lines()
        .filter_map(|line| line.strip_prefix("### "))
        .map(|heading| heading.split(" {#").next().unwrap_or_default().to_owned())
        .collect();
    let served = server_route_names();
    assert!(
        served.len() >= 10,
        "the server's route names were not found in src/ (\"METHOD /path\" literals): {served:?}"
    );
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "routes the server answers with no `### METHOD /path {{#anchor}}` in docs/src/http-api.md: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "headings of docs/src/http-api.md that name no route of the server: {unserved:?}"
    );
}

/// The lines of a Markdown text outside its fenced code blocks, with their inline code spans
/// taken out, each with its line number (from 1).
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let mut fence: Option<&str> = None;
    let mut prose = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"]
            .into_iter()
            .find(|marker| trimmed.starts_with(marker));
        match (fence, marker) {
            (None, Some(marker)) => fence = Some(marker),
            (Some(open), Some(marker)) if open == marker => fence = None,
            (None, None) => {
                // Inline code spans: every other piece between backticks.
                let outside: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
                prose.push((index + 1, outside));
            }
            _ => {}
        }
    }
    prose
}

/// The anchors GitHub gives a Markdown file: each heading's text, lower-cased, with spaces made
/// hyphens and everything but letters, digits, hyphens and underscores dropped (a repeated one
/// numbered `-1`, `-2`, …); and every `id="…"` the file sets in HTML.
fn github_anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(marker) = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m)) {
            fence = match fence {
                None => Some(marker),
                Some(open) if open == marker => None,
                open => open,
            };
            continue;
        }
        if fence.is_some() {
            continue;
        }
        if line.starts_with('#') {
            let heading = line.trim_start_matches('#');
            // A link in a heading shows its text alone.
            let shown: String = heading
                .split("](")
                .enumerate()
                .map(|(i, piece)| {
                    if i == 0 {
                        piece
                    } else {
                        piece.split_once(')').map_or("", |(_, rest)| rest)
                    }
                })
                .collect();
            let base: String = shown
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect();
            let mut anchor = base.clone();
            let mut n = 0;
            while anchors.contains(&anchor) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
            anchors.insert(anchor);
        }
        for piece in line.split("id=\"").skip(1) {
            if let Some(id) = piece.split('"').next() {
                anchors.insert(id.to_owned());
            }
        }
    }
    anchors
}

#[test]
fn every_relative_link_of_the_pages_at_the_root_resolves() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for name in [
        "README.md",
        "BENCHMARKS.md",
        "CONTRIBUTING.md",
        "CHANGELOG.md",
    ] {
        let text = read(&root().join(name));
        for (number, line) in prose_lines(&text) {
            for target in link_targets(&line) {
                let target = target.trim();
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
                if file.starts_with('/') {
                    problems.push(format!("{name}:{number}: {target}: an absolute path"));
                    continue;
                }
                let path = if file.is_empty() {
                    root().join(name)
                } else {
                    root().join(file)
                };
                if !path.exists() {
                    problems.push(format!("{name}:{number}: {target}: no such file"));
                    continue;
                }
                if anchor.is_empty() {
                    continue;
                }
                if !path.is_file() || path.extension().is_none_or(|ext| ext != "md") {
                    problems.push(format!(
                        "{name}:{number}: {target}: an anchor into what is not a Markdown file"
                    ));
                } else if !github_anchors(&read(&path)).contains(anchor) {
                    problems.push(format!(
                        "{name}:{number}: {target}: {} has no heading or id #{anchor}",
                        path.strip_prefix(root()).unwrap_or(&path).display()
                    ));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} relative links found: is the parser blind?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_anchors_github_gives_are_the_ones_the_links_use() {
    let text = "# distlock\n## `run`: the exec guard\n### Once per period across a fleet: `--hold-at-least`\n\
                ## Exit codes\n## Exit codes\n```sh\n# not a heading\n```\n\
                ## Routes {#routes}\n## See [the book](docs/src/SUMMARY.md) now\n<a id=\"code-75\"></a>\n";
    let anchors = github_anchors(text);
    let expected: BTreeSet<String> = [
        "distlock",
        "run-the-exec-guard",
        "once-per-period-across-a-fleet---hold-at-least",
        "exit-codes",
        "exit-codes-1",
        "routes-routes",
        "see-the-book-now",
        "code-75",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(anchors, expected);
}

#[test]
fn the_readme_is_at_most_400_lines() {
    let lines = read(&root().join("README.md")).lines().count();
    assert!(
        lines <= 400,
        "README.md has {lines} lines; the details belong in the book under docs/"
    );
}

/// Whether one of the first `screen` lines of `text` links to a target that ends with one of
/// `ends`.
fn links_early(text: &str, screen: usize, ends: &[&str]) -> bool {
    prose_lines(text)
        .into_iter()
        .take_while(|(number, _)| *number <= screen)
        .flat_map(|(_, line)| link_targets(&line))
        .any(|target| ends.iter().any(|end| target.ends_with(end)))
}

#[test]
fn a_newcomer_finds_the_cron_recipe_the_ci_recipe_and_the_exit_codes_in_the_first_screenful() {
    // A terminal or a browser window shows about 40 lines before anything is scrolled.
    const SCREEN: usize = 40;
    let wanted: [(&str, &[&str]); 3] = [
        (
            "the cron recipe",
            &["recipes/cron.md", "#cron-skip-if-running"],
        ),
        (
            "the CI recipe",
            &["recipes/ci-deploy.md", "#a-ci-step-one-deploy-at-a-time"],
        ),
        (
            "the exit codes",
            &["reference/exit-codes.md", "#exit-codes"],
        ),
    ];
    for page in ["README.md", "docs/src/introduction.md"] {
        let text = read(&root().join(page));
        for (what, ends) in wanted {
            assert!(
                links_early(&text, SCREEN, ends),
                "{page}: no link to {what} in its first {SCREEN} lines (one of {ends:?})"
            );
        }
    }
}

#[test]
fn each_recipe_excerpt_of_the_readme_is_lines_of_its_file() {
    let readme = read(&root().join("README.md"));
    let mut lines = readme.lines();
    let mut excerpts = Vec::new();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("<!-- excerpt: ") else {
            assert!(
                !line.contains("<!-- excerpt"),
                "malformed excerpt marker {line:?}"
            );
            continue;
        };
        let path = rest
            .strip_suffix(" -->")
            .unwrap_or_else(|| panic!("malformed excerpt marker {line:?}"));
        let open = lines.next().unwrap_or_default();
        assert!(
            open.starts_with("```"),
            "the marker for {path} must be followed by a code block, not {open:?}"
        );
        let file = read(&root().join(path));
        let file_lines: BTreeSet<&str> = file.lines().map(str::trim).collect();
        let mut shown = 0;
        loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("the code block for {path} never ends"));
            if line == "```" {
                break;
            }
            if line.trim().is_empty() {
                continue;
            }
            shown += 1;
            assert!(
                file_lines.contains(line.trim()),
                "README.md's excerpt of {path} shows a line that is not in it: {line:?}"
            );
        }
        assert!(shown > 0, "README.md's excerpt of {path} is empty");
        excerpts.push(path.to_owned());
    }
    // The five short recipes: cron (skip and wait), a CI step, a deploy with a fence, and a
    // server, each an excerpt of a file the tests run or of the page that shows it.
    for needed in [
        "examples/crontab",
        "examples/ci-deploy.yml",
        "examples/deploy.sh",
        "docs/src/hosts/through-a-server.md",
    ] {
        assert!(
            excerpts.iter().any(|path| path == needed),
            "README.md has no excerpt of {needed}: {excerpts:?}"
        );
    }
}
