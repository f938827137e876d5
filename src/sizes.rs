//! Files of one concept: no file under `src/` holds more than [`MOST_LINES`] lines of code
//! that is not test code (its `#[cfg(test)]` modules, and the files of those, are left out;
//! comments count, as the reader reads them). Functions are held to 100 lines by clippy's
//! `too_many_lines`, allowed only in test modules.

use std::path::Path;

use crate::layers::{sources, test_files, without_tests};

/// The most lines of non-test code a file may hold.
const MOST_LINES: usize = 500;

/// The lines of `text` outside its test modules.
fn lines(text: &str) -> usize {
    without_tests(text).0.trim_end().lines().count()
}

#[test]
fn no_file_holds_more_than_500_lines_of_code() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources = sources(&src);
    let tests = test_files(&sources);
    let mut long: Vec<String> = sources
        .iter()
        .filter(|(path, _)| !tests.contains(path))
        .map(|(path, text)| (path, lines(text)))
        .filter(|(_, lines)| *lines > MOST_LINES)
        .map(|(path, lines)| format!("{}: {lines} lines", path.display()))
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "files over {MOST_LINES} lines of code:\n{}",
        long.join("\n")
    );
}

#[test]
fn test_modules_and_their_files_are_not_counted() {
    let text = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn b() {}\n    fn c() {}\n}\n";
    assert_eq!(lines(text), 1);
    let long = format!(
        "{}#[cfg(test)]\nmod tests;\n",
        "fn a() {}\n".repeat(MOST_LINES + 1)
    );
    assert_eq!(
        lines(&long),
        MOST_LINES + 1,
        "a file over the limit is found"
    );
    let sources = vec![
        (Path::new("a.rs").to_path_buf(), long),
        (Path::new("a/tests.rs").to_path_buf(), String::new()),
    ];
    assert_eq!(
        test_files(&sources),
        [Path::new("a/tests.rs").to_path_buf()].into()
    );
}
