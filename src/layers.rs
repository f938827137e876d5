//! The layers of the crate, checked: every file under `src/` is read, the names its code takes
//! from other files (`use crate::…`, `super::…`, and paths such as `crate::x::y` in its code)
//! are followed to the file that defines them, and the test fails on an edge that points up
//! the order of [`LAYERS`] and on any cycle between files. ARCHITECTURE.md draws the same
//! order. Test code (`#[cfg(test)]` modules and their files) is left out: a test may use
//! whatever it checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules from the bottom up; a module may use those of lower layers, and none
/// of its own layer but itself. `main` is the binary.
const LAYERS: &[&[&str]] = &[
    &["lock", "exit", "signals"],
    &["engine"],
    &["answer", "protocol"],
    &["store"],
    &["error"],
    &["output"],
    &["wait"],
    &["guard", "serve"],
    &["cli"],
    &["commands"],
    &["main"],
];

/// One file of the crate, as this test reads it.
struct File {
    path: PathBuf,
    /// Its module's path below the crate (`["store", "op"]`); `["main"]` for the binary.
    module: Vec<String>,
    /// Its code, comments, strings and test modules taken out.
    code: String,
    /// Each `use` binding: the name it brings in, and the path it names.
    uses: Vec<(String, Vec<String>)>,
    /// The names of the items it defines.
    items: BTreeSet<String>,
}

/// The code of `text` without comments, string and character literals.
fn without_comments(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        let next = chars.get(at + 1).copied();
        if c == '/' && next == Some('/') {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while at < chars.len() {
                if chars[at] == '/' && chars.get(at + 1) == Some(&'*') {
                    depth += 1;
                    at += 2;
                } else if chars[at] == '*' && chars.get(at + 1) == Some(&'/') {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    at += 1;
                }
            }
        } else if c == 'r' && (next == Some('#') || next == Some('"')) && !word_before(&chars, at) {
            // A raw string: r"…" or r#"…"#.
            let hashes = chars[at + 1..].iter().take_while(|&&c| c == '#').count();
            if chars.get(at + 1 + hashes) == Some(&'"') {
                at += 2 + hashes;
                let close: Vec<char> = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                while at < chars.len() && chars[at..].iter().take(close.len()).ne(close.iter()) {
                    at += 1;
                }
                at += close.len();
                out.push_str("\"\"");
            } else {
                out.push(c);
                at += 1;
            }
        } else if c == '"' {
            at += 1;
            while at < chars.len() && chars[at] != '"' {
                at += if chars[at] == '\\' { 2 } else { 1 };
            }
            at += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (chars.get(at + 2) == Some(&'\'') || next == Some('\\')) {
            // A character literal ('x', '\n', '\u{…}'); a lifetime has no closing quote.
            at += 1;
            while at < chars.len() && chars[at] != '\'' {
                at += if chars[at] == '\\' { 2 } else { 1 };
            }
            at += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            at += 1;
        }
    }
    out
}

/// Whether the character before `at` continues a word (so `r` there is not a raw string's).
fn word_before(chars: &[char], at: usize) -> bool {
    at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_')
}

/// `code` without the items marked `#[cfg(test)]`, and the names of the test modules it
/// declares in files of their own (`#[cfg(test)] mod tests;`).
pub(crate) fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut files = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = rest[at + "#[cfg(test)]".len()..].trim_start();
        let end = item.find([';', '{']).unwrap_or(item.len());
        if item[end..].starts_with(';') {
            if let Some(name) = item[..end].trim().strip_prefix("mod ") {
                files.push(name.trim().to_owned());
            }
            rest = &item[end + 1..];
        } else {
            let mut depth = 0;
            let mut close = item.len();
            for (i, c) in item.char_indices().skip(end) {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            close = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            rest = &item[close..];
        }
    }
    out.push_str(rest);
    (out, files)
}

/// The `use` declarations of `code`: each binding's name and path, and the code without them.
fn uses(code: &str) -> (Vec<(String, Vec<String>)>, String) {
    let mut bindings = Vec::new();
    let mut rest = String::new();
    let mut left = code;
    while let Some(at) = find_use(left) {
        rest.push_str(&left[..at]);
        let after = &left[at..];
        let start = after.find("use ").unwrap_or(0) + 4;
        let end = after.find(';').unwrap_or(after.len());
        let tree: String = after[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        expand(&[], &tree, &mut bindings);
        left = &after[(end + 1).min(after.len())..];
    }
    rest.push_str(left);
    (bindings, rest)
}

/// Where the next `use` declaration (maybe `pub`, `pub(crate)`, `pub(super)`) begins.
fn find_use(code: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(found) = code[from..].find("use ") {
        let at = from + found;
        let line_start = code[..at].rfind('\n').map_or(0, |n| n + 1);
        let before = code[line_start..at].trim();
        if before.is_empty() || before.starts_with("pub") {
            return Some(
                line_start + code[line_start..].len() - code[line_start..].trim_start().len(),
            );
        }
        from = at + 4;
    }
    None
}

/// The bindings of one use tree `tree` under the path `prefix`.
fn expand(prefix: &[String], tree: &str, out: &mut Vec<(String, Vec<String>)>) {
    let tree = tree
        .trim()
        .trim_start_matches("pub(crate) ")
        .trim_start_matches("pub(super) ");
    let tree = tree.trim_start_matches("pub ").trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = split_path(&tree[..open]);
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let path: Vec<String> = prefix.iter().cloned().chain(head).collect();
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&path, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&path, &inner[start..], out);
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((path, alias)) => (path, Some(alias.trim())),
        None => (tree, None),
    };
    let segments = split_path(path);
    let mut full: Vec<String> = prefix.to_vec();
    full.extend(segments.iter().filter(|s| s.as_str() != "self").cloned());
    let Some(last) = full.last().cloned() else {
        return;
    };
    if last == "*" || full.is_empty() {
        return;
    }
    let name = alias.map_or(last, str::to_owned);
    if name != "_" {
        out.push((name, full));
    }
}

fn split_path(path: &str) -> Vec<String> {
    path.split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `code` without what declares a name rather than uses one: `mod x;` lines and the names of
/// enum variants (so that a variant `Busy` is not taken for a type `Busy` brought in).
fn without_declarations(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut depth = 0usize;
    // The depth inside which lines declare variants: an enum's body.
    let mut variants: Option<usize> = None;
    for line in code.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("mod ") || trimmed.starts_with("pub mod ") {
            out.push('\n');
            continue;
        }
        let mut kept = line.to_owned();
        if variants == Some(depth) && !trimmed.starts_with('#') {
            let name_len = trimmed
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(trimmed.len());
            kept = trimmed[name_len..].to_owned();
        }
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        let opens_enum = words.iter().position(|w| *w == "enum").is_some_and(|at| {
            words[..at].iter().all(|w| w.starts_with("pub")) && trimmed.ends_with('{')
        });
        for c in line.chars() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if variants.is_some_and(|inner| depth < inner) {
                        variants = None;
                    }
                }
                _ => {}
            }
        }
        if opens_enum {
            variants = Some(depth);
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// The names of the items `code` defines: at the top of the file, and the `pub` types a macro
/// there declares.
fn items(code: &str) -> BTreeSet<String> {
    let kinds = [
        "fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod",
    ];
    let mut found = BTreeSet::new();
    for line in code.lines() {
        let top = !line.starts_with(char::is_whitespace);
        let mut words = line.split_whitespace().peekable();
        let mut public = false;
        while let Some(&word) = words.peek() {
            if word.starts_with("pub") {
                public = true;
                words.next();
            } else if ["async", "unsafe", "extern"].contains(&word) {
                words.next();
            } else {
                break;
            }
        }
        let (Some(kind), Some(name)) = (words.next(), words.next()) else {
            continue;
        };
        let declares = if top {
            kinds.contains(&kind) || kind == "macro_rules!"
        } else {
            public && ["struct", "enum", "trait"].contains(&kind)
        };
        if declares {
            let name: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// Every source file below `src`: its path below `src`, and its text.
pub(crate) fn sources(src: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let mut folders = vec![src.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder)
            .expect("a folder of src")
            .flatten()
        {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                let relative = path.strip_prefix(src).expect("below src").to_path_buf();
                found.push((relative, text));
            }
        }
    }
    found.sort();
    found
}

/// The paths (below `src`) of the files of `sources` that are test code: those a file
/// declares as a test module (`#[cfg(test)] mod tests;`), and theirs.
pub(crate) fn test_files(sources: &[(PathBuf, String)]) -> BTreeSet<PathBuf> {
    let mut tests = BTreeSet::new();
    for (path, text) in sources {
        let (_, declared) = without_tests(&without_comments(text));
        let module = path.with_extension("");
        let folder = if module == Path::new("lib") || module == Path::new("main") {
            PathBuf::new()
        } else {
            module
        };
        tests.extend(
            declared
                .iter()
                .map(|name| folder.join(format!("{name}.rs"))),
        );
    }
    let below: Vec<PathBuf> = tests.iter().map(|test| test.with_extension("")).collect();
    tests.extend(
        (sources.iter())
            .map(|(path, _)| path)
            .filter(|path| below.iter().any(|test| path.starts_with(test)))
            .cloned(),
    );
    tests
}

/// The files of `sources` (paths below `src`), test files left out.
fn files(sources: Vec<(PathBuf, String)>) -> Vec<File> {
    let tests = test_files(&sources);
    let mut files = Vec::new();
    for (path, text) in sources {
        if tests.contains(&path) {
            continue;
        }
        let mut module: Vec<String> = path
            .with_extension("")
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if module == ["lib"] {
            module.clear();
        }
        let (code, _) = without_tests(&without_comments(&text));
        let (uses, code) = uses(&code);
        let items = items(&code);
        let code = without_declarations(&code);
        files.push(File {
            path,
            module,
            code,
            uses,
            items,
        });
    }
    files
}

/// The files, by module path, and what a path names.
struct Crate {
    files: Vec<File>,
    by_module: BTreeMap<Vec<String>, usize>,
}

impl Crate {
    /// The file that defines what `path` names, written in the file of `from`; `None` for a
    /// name of another crate.
    fn resolve(&self, from: usize, path: &[String], depth: usize) -> Option<usize> {
        if depth > 16 || path.is_empty() {
            return None;
        }
        let here = &self.files[from].module;
        let (mut module, rest): (Vec<String>, &[String]) = match path[0].as_str() {
            "crate" | "distlock" => (Vec::new(), &path[1..]),
            "super" => (here[..here.len().saturating_sub(1)].to_vec(), &path[1..]),
            "self" => (here.clone(), &path[1..]),
            _ => (here.clone(), path),
        };
        let mut at = self.by_module.get(&module).copied()?;
        for (i, segment) in rest.iter().enumerate() {
            let child: Vec<String> = module.iter().cloned().chain([segment.clone()]).collect();
            if let Some(&file) = self.by_module.get(&child) {
                module = child;
                at = file;
                continue;
            }
            let file = &self.files[at];
            if file.items.contains(segment) {
                return Some(at);
            }
            if let Some((_, target)) = file.uses.iter().find(|(name, _)| name == segment) {
                let target: Vec<String> = target.iter().chain(&rest[i + 1..]).cloned().collect();
                return self.resolve(at, &target, depth + 1);
            }
            if i == 0 && path[0] != "crate" && path[0] != "super" && path[0] != "self" {
                // A name this module neither defines nor takes: another crate's.
                return None;
            }
            return Some(at);
        }
        Some(at)
    }

    /// The files each file's code takes something from, itself left out.
    fn edges(&self) -> Vec<BTreeSet<usize>> {
        // The paths in `code` that begin with one of `starts` (`crate::`, or a child module's
        // name and `::`), not as the end of a longer path.
        let inline = |code: &str, starts: &[String]| -> Vec<Vec<String>> {
            let mut paths = Vec::new();
            for start in starts {
                let mut from = 0;
                while let Some(found) = code[from..].find(start.as_str()) {
                    let at = from + found;
                    from = at + start.len();
                    let before = code[..at].chars().next_back();
                    if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                        continue;
                    }
                    let path: String = code[at..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                        .collect();
                    paths.push(split_path(&path));
                }
            }
            paths
        };
        (0..self.files.len())
            .map(|at| {
                let file = &self.files[at];
                let mut to = BTreeSet::new();
                for (name, path) in &file.uses {
                    if mentions(&file.code, name) {
                        to.extend(self.resolve(at, path, 0));
                    }
                }
                let mut starts: Vec<String> = ["crate::", "super::", "distlock::"]
                    .map(str::to_owned)
                    .to_vec();
                let children = (self.by_module.keys())
                    .filter(|module| module.len() == file.module.len() + 1)
                    .filter(|module| module.starts_with(&file.module));
                starts.extend(children.filter_map(|m| m.last()).map(|m| format!("{m}::")));
                for path in inline(&file.code, &starts) {
                    to.extend(self.resolve(at, &path, 0));
                }
                to.remove(&at);
                to
            })
            .collect()
    }
}

/// Whether `code` names `name` on its own: as a word that is not a field, a method or the end
/// of a longer path (`Exit::Busy` does not name a `Busy` taken from elsewhere).
fn mentions(code: &str, name: &str) -> bool {
    let mut from = 0;
    while let Some(found) = code[from..].find(name) {
        let at = from + found;
        from = at + name.len();
        let before = code[..at].chars().next_back();
        let after = code[at + name.len()..].chars().next();
        let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if part(before) || part(after) || code[..at].ends_with("::") || before == Some('.') {
            continue;
        }
        return true;
    }
    false
}

impl Crate {
    fn of(sources: Vec<(PathBuf, String)>) -> Crate {
        let files = files(sources);
        let by_module = (files.iter().enumerate())
            .map(|(at, file)| (file.module.clone(), at))
            .collect();
        Crate { files, by_module }
    }

    /// This crate, as its `src/` holds it now.
    fn here() -> Crate {
        Crate::of(sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")))
    }

    /// Each edge that does not point down the layers, in words.
    fn upward(&self) -> Vec<String> {
        let mut up = Vec::new();
        for (from, to) in self.edges().iter().enumerate() {
            let from_module = &self.files[from].module;
            for &to in to {
                let to_module = &self.files[to].module;
                if from_module.first() == to_module.first() || to_module.is_empty() {
                    continue;
                }
                if let (Some(a), Some(b)) = (layer(from_module), layer(to_module)) {
                    if a > b {
                        continue;
                    }
                }
                let (from, to) = (&self.files[from].path, &self.files[to].path);
                up.push(format!("{} uses {}", from.display(), to.display()));
            }
        }
        up
    }

    /// Each cycle between files, in words.
    fn cycles(&self) -> Vec<String> {
        let edges = self.edges();
        // Depth first, each file marked 1 while what it uses is walked, 2 once done.
        let mut mark = vec![0u8; edges.len()];
        let mut found = Vec::new();
        for at in 0..edges.len() {
            if mark[at] == 0 {
                walk(at, &edges, &mut mark, &mut Vec::new(), &mut found);
            }
        }
        found
            .iter()
            .map(|cycle| {
                let names: Vec<String> = (cycle.iter().chain(cycle.first()))
                    .map(|&at| self.files[at].path.display().to_string())
                    .collect();
                names.join(" -> ")
            })
            .collect()
    }
}

/// Walks what `at` uses, depth first, noting each cycle met in `found`.
fn walk(
    at: usize,
    edges: &[BTreeSet<usize>],
    mark: &mut [u8],
    path: &mut Vec<usize>,
    found: &mut Vec<Vec<usize>>,
) {
    mark[at] = 1;
    path.push(at);
    for &next in &edges[at] {
        match mark[next] {
            0 => walk(next, edges, mark, path, found),
            1 => {
                let from = path.iter().position(|&p| p == next).unwrap_or(0);
                found.push(path[from..].to_vec());
            }
            _ => {}
        }
    }
    path.pop();
    mark[at] = 2;
}

/// The layer of a module path's top-level module.
fn layer(module: &[String]) -> Option<usize> {
    let top = module.first()?;
    LAYERS
        .iter()
        .position(|layer| layer.contains(&top.as_str()))
}

#[test]
fn every_file_uses_only_what_lies_below_it() {
    let up = Crate::here().upward();
    assert!(
        up.is_empty(),
        "edges that do not point down the layers:\n{}",
        up.join("\n")
    );
}

#[test]
fn no_two_files_use_each_other_even_through_others() {
    let cycles = Crate::here().cycles();
    assert!(
        cycles.is_empty(),
        "cycles between files:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_check_follows_names_to_the_file_that_defines_them_and_finds_what_is_wrong() {
    let source = |path: &str, text: &str| (PathBuf::from(path), text.to_owned());
    let planted = Crate::of(vec![
        source("lib.rs", "pub mod lock;\npub mod store;\npub mod wait;\n"),
        source(
            "lock.rs",
            "mod text;\npub use text::Resource;\npub struct Lock(Resource);\n",
        ),
        source("lock/text.rs", "pub struct Resource(String);\n"),
        // A name taken through a re-export leads to the file that defines it.
        source(
            "store.rs",
            "mod op;\npub use op::Op;\nuse crate::lock::Resource;\npub fn f(_: Resource) {}\n",
        ),
        // Upward: the store uses the waiter, in a path and through a `use`.
        source(
            "store/op.rs",
            "use crate::wait::Waited;\npub enum Op { A(Waited) }\npub fn g() -> crate::wait::Policy { todo!() }\n",
        ),
        // A cycle: each uses the other; test code and comments count for nothing.
        source(
            "wait.rs",
            "mod line;\nuse line::Line;\npub struct Waited(Line);\npub struct Policy;\n// crate::store::op::Op\n#[cfg(test)]\nmod tests { use crate::store::f; }\n",
        ),
        source(
            "wait/line.rs",
            "use super::Policy;\npub struct Line(Policy);\n",
        ),
    ]);
    let mut up = planted.upward();
    up.sort();
    assert_eq!(up, ["store/op.rs uses wait.rs"]);
    assert_eq!(planted.cycles(), ["wait.rs -> wait/line.rs -> wait.rs"]);
    // Followed to the defining file, not the one that re-exports it.
    let store = planted.by_module[&vec!["store".to_owned()]];
    let text = planted.by_module[&vec!["lock".to_owned(), "text".to_owned()]];
    assert!(planted.edges()[store].contains(&text));
    // And in this crate, the waiter does use the store's operations.
    let here = Crate::here();
    let wait = here.by_module[&vec!["wait".to_owned()]];
    let op = here.by_module[&vec!["store".to_owned(), "op".to_owned()]];
    assert!(here.edges()[wait].contains(&op));
}

/// Prints each file's edges (`cargo test --lib layers::show -- --ignored --nocapture`).
#[test]
#[ignore = "a view for people, not a check"]
fn show() {
    let code = Crate::here();
    for (from, to) in code.edges().iter().enumerate() {
        let names: Vec<String> = (to.iter())
            .map(|&at| code.files[at].path.display().to_string())
            .collect();
        eprintln!(
            "{} -> {}",
            code.files[from].path.display(),
            names.join(", ")
        );
    }
}
