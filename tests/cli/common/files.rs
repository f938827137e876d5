//! Files that the commands under test write in the scratch folder: a line, a number; and what
//! a command left in a folder.

use std::fs;
use std::path::Path;

/// The file's contents without surrounding whitespace; fails the test if it cannot be read.
pub fn read_trimmed(path: &Path) -> String {
    fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
        .trim()
        .to_owned()
}

/// The number the file holds (a fence, a pid, milliseconds).
pub fn read_number(path: &Path) -> i64 {
    let text = read_trimmed(path);
    text.parse()
        .unwrap_or_else(|err| panic!("{} holds {text:?}, not a number: {err}", path.display()))
}

/// The names in `dir`, sorted: what a command left behind.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read the folder")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}
