//! Starting `run`'s command as `execvp(3)` starts a program, in a process group of its own and
//! tied to the guard:
//! - a name without a slash is looked up in `PATH` here, in the parent ([`on_path`]);
//! - a file the kernel will not execute (no `#!` line) runs under `/bin/sh`, as execvp runs it;
//! - a missing interpreter (`#!/no/such/sh`) is reported as such, 127, not as the script
//!   missing;
//! - the command gets SIGKILL when the guard dies ([`process::tie_to_guard`], Linux).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use nix::unistd::{AccessFlags, access};

use crate::exit::Exit;
use crate::output::warn;

use super::process;

/// The shell execvp runs a script without a `#!` line under.
const SHELL: &str = "/bin/sh";

/// Starts `command` (the program and its arguments) with `env` added to the environment (a
/// name without a value taken out of it), in a process group of its own. The exit that says why it could not start otherwise, after one
/// line on stderr: 127 not found (the program, or its interpreter), 126 found but not
/// executable; 64 for no command at all.
pub fn spawn(command: &[OsString], env: &[(&str, Option<OsString>)]) -> Result<Child, Exit> {
    let (program, args) = command.split_first().ok_or(Exit::Usage)?;
    let found = on_path(program, std::env::var_os("PATH").as_deref());
    let path = found.as_deref().unwrap_or(Path::new(program));
    let start = |command: &mut Command| {
        for (name, value) in env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command.process_group(0);
        process::tie_to_guard(command);
        command.spawn()
    };
    let direct = start(Command::new(path).arg0(program).args(args));
    let spawned = match direct {
        Err(err) if err.raw_os_error() == Some(libc::ENOEXEC) => {
            // execvp's rule for a file the kernel cannot execute: a shell script.
            start(Command::new(SHELL).arg(path).args(args))
        }
        other => other,
    };
    spawned.map_err(|err| {
        let shown = program.to_string_lossy();
        if err.kind() == std::io::ErrorKind::NotFound {
            if crlf_shebang(path) {
                warn(format_args!(
                    "cannot run {shown}: its #! line ends in a carriage return (Windows line \
                     ends), so its interpreter's name does too; convert it with dos2unix"
                ));
            } else {
                match interpreter_of(path).filter(|interpreter| !interpreter.exists()) {
                    Some(missing) => warn(format_args!(
                        "cannot run {shown}: its interpreter {} was not found",
                        missing.display()
                    )),
                    None => warn(format_args!("cannot run {shown}: {err}")),
                }
            }
            Exit::CommandNotFound
        } else {
            warn(format_args!("cannot run {shown}: {err}"));
            Exit::CannotExecute
        }
    })
}

/// The interpreter a script's `#!` line names, if `path` is a readable file that starts with
/// one.
fn interpreter_of(path: &Path) -> Option<PathBuf> {
    let mut head = [0; 256];
    let mut file = std::fs::File::open(path).ok()?;
    let read = file.read(&mut head).ok()?;
    shebang(&head[..read])
}

/// Whether the file at `path` starts with a `#!` line that ends in `\r\n`.
fn crlf_shebang(path: &Path) -> bool {
    let mut head = [0; 256];
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let read = file.read(&mut head).unwrap_or(0);
    let head = &head[..read];
    head.starts_with(b"#!")
        && head
            .split(|&b| b == b'\n')
            .next()
            .is_some_and(|line| line.ends_with(b"\r") && head.len() > line.len())
}

/// The interpreter of a file that starts with `head`: the first word after `#!`.
fn shebang(head: &[u8]) -> Option<PathBuf> {
    let line = head.strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
    let word = line
        .split(u8::is_ascii_whitespace)
        .find(|word| !word.is_empty())?;
    Some(PathBuf::from(OsStr::from_bytes(word)))
}

/// Finds a command name without a slash in the folders of `path` (`PATH`), as `execvp(3)`
/// does: the first regular file this process may execute. Searching here rather than in the
/// child saves one failed `execve` per folder before the right one, which the lock's holder
/// otherwise waits out (the child shares its memory until it execs). `None` for a name with a
/// slash and when nothing is found: spawning then searches itself and reports the error (127
/// not found, 126 found but not executable).
fn on_path(program: &OsStr, path: Option<&OsStr>) -> Option<PathBuf> {
    if program.is_empty() || program.as_bytes().contains(&b'/') {
        return None;
    }
    std::env::split_paths(path?)
        .map(|folder| {
            // An empty entry is the current folder.
            let folder = if folder.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                folder
            };
            folder.join(program)
        })
        .find(|candidate| {
            candidate.metadata().is_ok_and(|m| m.is_file())
                && access(candidate.as_path(), AccessFlags::X_OK).is_ok()
        })
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn shebang_names_the_first_word_after_hash_bang() {
        let cases: [(&[u8], Option<&str>); 9] = [
            (b"#!/bin/sh\necho", Some("/bin/sh")),
            (b"#! /usr/bin/env python3\n", Some("/usr/bin/env")),
            (b"#!/opt/tool -x -y", Some("/opt/tool")),
            (b"#!\t/bin/bash\r\n", Some("/bin/bash")),
            (b"#!/no/newline/at/all", Some("/no/newline/at/all")),
            (b"#!\n/bin/sh", None),
            (b"#!   ", None),
            (b"echo hi\n", None),
            (b"", None),
        ];
        for (head, want) in cases {
            assert_eq!(
                shebang(head),
                want.map(PathBuf::from),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn on_path_finds_the_first_executable_file_as_execvp_does() {
        let scratch = tempfile::tempdir().unwrap();
        let folder = |name: &str| {
            let folder = scratch.path().join(name);
            fs::create_dir(&folder).unwrap();
            folder
        };
        let tool = |folder: &PathBuf, mode: u32| {
            let file = folder.join("tool");
            fs::write(&file, "#!/bin/sh\n").unwrap();
            fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
        };
        let (plain, dir, exec, later) = (folder("a"), folder("b"), folder("c"), folder("d"));
        tool(&plain, 0o644);
        fs::create_dir(dir.join("tool")).unwrap();
        tool(&exec, 0o755);
        tool(&later, 0o700);
        let path = |folders: &[&PathBuf]| std::env::join_paths(folders).unwrap();
        let cases: [(&str, Option<OsString>, Option<&PathBuf>); 9] = [
            // Not executable, a folder: skipped, as execvp skips them.
            (
                "tool",
                Some(path(&[&plain, &dir, &exec, &later])),
                Some(&exec),
            ),
            ("tool", Some(path(&[&later, &exec])), Some(&later)),
            ("tool", Some(path(&[&plain, &dir])), None),
            ("missing", Some(path(&[&plain, &dir, &exec])), None),
            // An empty entry is the current folder, which has no `tool`.
            (
                "tool",
                Some(OsString::from(format!(":{}", exec.display()))),
                Some(&exec),
            ),
            // A name with a slash is not searched for; nor is anything without a PATH.
            ("./tool", Some(path(&[&exec])), None),
            ("c/tool", Some(path(&[&scratch.path().to_owned()])), None),
            ("", Some(path(&[&exec])), None),
            ("tool", None, None),
        ];
        for (program, path, found) in cases {
            assert_eq!(
                on_path(OsStr::new(program), path.as_deref()),
                found.map(|folder| folder.join(program)),
                "{program} on {path:?}"
            );
        }
    }
}
