//! Where the store is, as the user named it: [`Location`] reads `--db` / `DISTLOCK_DB` (a file
//! path or a `postgres://` URL, never guessed one for the other), falls back to the default path
//! under the user's state folder, and gives the value `run` exports to its command. A SQLite
//! store's [`NetworkFs`] says whether a network filesystem may hold it
//! (`DISTLOCK_ALLOW_NETWORK_FS`).

use std::ffi::OsStr;
use std::path::PathBuf;

use super::postgres;

/// Where the store is, as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file, how its missing folders are made, and whether it may lie on a network
    /// filesystem.
    Sqlite(PathBuf, Folders, NetworkFs),
    Postgres(String),
    /// A distlock server (`http://` or `https://`), which holds the store itself.
    Server(super::remote::ServerUrl),
}

/// How the missing folders of a SQLite store's path are made, by the first command that writes
/// to it (no other command makes any).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folders {
    /// Mode 0700, as the XDG Base Directory spec asks of the folders it names: the default
    /// store, under `$XDG_STATE_HOME` or `~/.local/state`, is the user's own.
    Private,
    /// As `mkdir -p` makes them (0777 less the umask): the user named the path, maybe for a
    /// store shared by a group, made under `umask 002` in a setgid folder (see the README).
    AsUmask,
}

/// Whether a SQLite store may lie on a network filesystem (NFS, SMB, FUSE, …; see
/// `store::network_fs`), where two hosts could both get a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkFs {
    /// Refused, with exit 74 and the filesystem named: the default.
    Refused,
    /// Opened all the same (`DISTLOCK_ALLOW_NETWORK_FS=1`): the user says that one host
    /// alone uses the mount.
    Allowed,
}

impl NetworkFs {
    /// Reads the value of `DISTLOCK_ALLOW_NETWORK_FS`: `1` allows; unset, empty or `0`
    /// refuses, as without it.
    ///
    /// # Errors
    ///
    /// A usage message for any other value (`yes`, `true`, ` 1`): a setting that does not say
    /// what it means leaves nothing to guess from.
    pub fn from_env(value: Option<&OsStr>) -> Result<NetworkFs, String> {
        match value {
            None => Ok(NetworkFs::Refused),
            Some(value) if value.is_empty() || value == "0" => Ok(NetworkFs::Refused),
            Some(value) if value == "1" => Ok(NetworkFs::Allowed),
            Some(value) => Err(format!(
                "DISTLOCK_ALLOW_NETWORK_FS must be 1 (open a SQLite store on a network \
                 filesystem all the same) or 0 (refuse it, as when unset or empty), not {:?}",
                crate::lock::shown(&value.to_string_lossy())
            )),
        }
    }
}

impl Location {
    /// Reads `--db` / `DISTLOCK_DB`. What it names is never guessed: a value with a URL
    /// scheme (`word://…` or `word:/…`, the scheme in any case) is a URL, and only
    /// `postgres`/`postgresql` (PostgreSQL) and `http`/`https` (a distlock server) are stores;
    /// any other scheme is refused, so a
    /// mistyped URL never becomes a local file named after it. Anything else is a file path
    /// (one with a colon in it is written `./a:b`). Without one, the default path under the
    /// user's state folder. A SQLite store may lie on a network filesystem as `network_fs`
    /// says.
    ///
    /// # Errors
    ///
    /// A usage message when a URL has an unknown scheme or cannot be read, `--db` is empty or
    /// blank, or no `--db` was given and neither `XDG_STATE_HOME` nor `HOME` is an absolute
    /// path.
    pub fn resolve(db: Option<&str>, network_fs: NetworkFs) -> Result<Location, String> {
        let Some(db) = db else {
            return default_path().map(|path| Location::Sqlite(path, Folders::Private, network_fs));
        };
        if db.trim().is_empty() {
            return Err("--db must not be empty or blank".to_owned());
        }
        if db.trim() != db {
            return Err(
                "--db has spaces around it; give the path or URL without them (a file name \
                 that really starts with a space is written ./ name)"
                    .to_owned(),
            );
        }
        let Some((scheme, rest)) = url_scheme(db) else {
            return path_of(db, network_fs);
        };
        match scheme.to_ascii_lowercase().as_str() {
            known @ ("postgres" | "postgresql") => {
                let url = format!("{known}:{rest}");
                postgres::Target::parse(&url)?;
                Ok(Location::Postgres(url))
            }
            "http" | "https" => Ok(Location::Server(super::remote::ServerUrl::parse(db)?)),
            _ => Err(format!(
                "--db: unknown URL scheme {:?}; distlock knows postgres:// and postgresql:// \
                 (PostgreSQL), http:// and https:// (a distlock server) and file paths (write a \
                 path with a colon in it as ./{}…)",
                crate::lock::shown(scheme),
                crate::lock::shown(scheme),
            )),
        }
    }

    /// The value `run` exports to its command as `DISTLOCK_DB`: a URL as given, a file path
    /// made absolute against the current folder, so that a command that changes folders still
    /// reaches this store. As [`std::path::absolute`] does it: `.` components are dropped and
    /// nothing else is touched — no symlink is resolved, no `..` collapsed, the file need not
    /// exist — so the value names the store exactly as `--db` did. Should the current folder
    /// be unreadable (removed), the path is exported as given.
    pub fn to_env_value(&self) -> std::ffi::OsString {
        match self {
            Location::Sqlite(path, ..) => std::path::absolute(path)
                .unwrap_or_else(|_| path.clone())
                .into_os_string(),
            Location::Postgres(url) => url.into(),
            Location::Server(url) => url.as_str().into(),
        }
    }
}

impl Location {
    /// The names by which the store's own messages may refer to it: a SQLite file's path (as
    /// given and made absolute), a PostgreSQL database's `user@host:port/db` and each of its
    /// hosts'. A server leaves them out of what it answers its callers, who need not learn
    /// where its store lives or who it logs in as. Longest first.
    pub fn names(&self) -> Vec<String> {
        let mut names = match self {
            Location::Sqlite(path, ..) => {
                let absolute = std::path::absolute(path).unwrap_or_else(|_| path.clone());
                vec![path.display().to_string(), absolute.display().to_string()]
            }
            Location::Postgres(url) => match postgres::Target::parse(url) {
                Ok(target) => std::iter::once(target.describe())
                    .chain(target.hosts().iter().map(postgres::Target::describe))
                    .collect(),
                Err(_) => Vec::new(),
            },
            Location::Server(_) => Vec::new(),
        };
        names.retain(|name| !name.is_empty());
        names.sort_by_key(|name| std::cmp::Reverse(name.len()));
        names.dedup();
        names
    }
}

/// A `--db` value that is no URL, as a path: refused where it is surely a mistyped URL (a
/// scheme distlock knows, or `://`, however it is spelled) or names a folder, and where SQLite
/// would read it as a URI itself (`file:…`).
fn path_of(db: &str, network_fs: NetworkFs) -> Result<Location, String> {
    let word = db
        .split_once(':')
        .map(|(word, _)| word.to_ascii_lowercase());
    let urlish = matches!(
        word.as_deref(),
        Some("postgres" | "postgresql" | "http" | "https" | "file" | "sqlite")
    );
    if urlish || db.contains("://") {
        return Err(format!(
            "--db looks like a URL but is not one distlock can read; distlock knows \
             postgres://… and postgresql://… (PostgreSQL), http://HOST:PORT and \
             https://HOST:PORT (a distlock server) and file paths (write a path with a colon in \
             it as ./{}…)",
            crate::lock::shown(db.split(':').next().unwrap_or_default())
        ));
    }
    if db.ends_with('/') {
        return Err("--db names a folder; a store is a file in it, e.g. DIR/locks.db".to_owned());
    }
    Ok(Location::Sqlite(
        PathBuf::from(db),
        Folders::AsUmask,
        network_fs,
    ))
}

/// The scheme of a value that is a URL, and what follows its colon: `word:/…`, where the word
/// is a URL scheme (RFC 3986: a letter, then letters, digits, `+`, `-` or `.`).
fn url_scheme(value: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = value.split_once(':')?;
    let mut chars = scheme.chars();
    let starts = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let word = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (starts && word && rest.starts_with('/')).then_some((scheme, rest))
}

/// `$XDG_STATE_HOME/distlock/locks.db`, else `$HOME/.local/state/distlock/locks.db`.
fn default_path() -> Result<PathBuf, String> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(state) = absolute("XDG_STATE_HOME") {
        return Ok(state.join("distlock").join("locks.db"));
    }
    if let Some(home) = absolute("HOME") {
        return Ok(home.join(".local/state/distlock/locks.db"));
    }
    let why = if std::env::var_os("HOME").is_some() {
        "HOME is not an absolute path"
    } else {
        "neither XDG_STATE_HOME nor HOME is set"
    };
    Err(format!("cannot find a default database: {why}; pass --db"))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::*;

    #[test]
    fn db_values_with_a_url_scheme_are_urls_and_only_known_schemes_are_stores() {
        // (value, what it names: Ok(path or url), or Err(a word the message must hold))
        let path = |p: &str| {
            Ok(Location::Sqlite(
                PathBuf::from(p),
                Folders::AsUmask,
                NetworkFs::Refused,
            ))
        };
        let pg = |u: &str| Ok(Location::Postgres(u.to_owned()));
        let server = |u: &str| {
            Ok(Location::Server(
                super::super::remote::ServerUrl::parse(u).unwrap(),
            ))
        };
        let refused = |word: &'static str| Err(word);
        let cases: [(&str, Result<Location, &str>); 34] = [
            ("locks.db", path("locks.db")),
            (
                "/var/lib/distlock/locks.db",
                path("/var/lib/distlock/locks.db"),
            ),
            ("./a:b", path("./a:b")),
            ("a:b", path("a:b")),
            ("dir/x:/y", path("dir/x:/y")),
            ("1x://y", refused("URL")),
            ("_x://y", refused("URL")),
            ("://x", refused("URL")),
            // A scheme distlock knows, however the rest is mistyped, is never a file; nor is
            // what SQLite itself would read as a URI.
            ("postgres:u:pw@h/x", refused("URL")),
            ("POSTGRES:", refused("URL")),
            ("https:x", refused("URL")),
            ("file:x.db", refused("URL")),
            ("./file:x.db", path("./file:x.db")),
            (" postgres://u:pw@h/x", refused("spaces")),
            ("locks.db\t", refused("spaces")),
            ("state/", refused("folder")),
            ("postgres://u@h/db", pg("postgres://u@h/db")),
            ("postgresql://u@h/db", pg("postgresql://u@h/db")),
            // Schemes in any case, passed on in lower case.
            ("POSTGRES://u@h/db", pg("postgres://u@h/db")),
            ("PostgreSQL://u@h/db", pg("postgresql://u@h/db")),
            // Typos and other databases are never files.
            ("postgress://u@h/db", refused("\"postgress\"")),
            ("mysql://x/y", refused("\"mysql\"")),
            ("sqlite:/tmp/x.db", refused("\"sqlite\"")),
            ("file:///tmp/x.db", refused("\"file\"")),
            ("a+b.c-d://x", refused("\"a+b.c-d\"")),
            ("postgres:/x", refused("PostgreSQL")),
            ("http://locks:7878", server("http://locks:7878")),
            ("HTTPS://locks:7878/", server("https://locks:7878")),
            ("http://u:pw@h:1", refused("credentials")),
            ("https://h/x/y", refused("no path")),
            ("http:/x/y", refused("HOST:PORT")),
            ("", refused("empty")),
            (" ", refused("blank")),
            ("\t\n", refused("blank")),
        ];
        for (value, want) in cases {
            let got = Location::resolve(Some(value), NetworkFs::Refused);
            match (&got, &want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{value:?}"),
                (Err(message), Err(word)) => {
                    assert!(message.contains(word), "{value:?}: {message}");
                    // The URL itself is never echoed: it may hold a password.
                    assert!(
                        !message.contains("x/y") && !message.contains("u@h"),
                        "{message}"
                    );
                }
                _ => panic!("{value:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn only_1_allows_a_network_filesystem_and_only_0_or_nothing_refuses_it() {
        let refused = Ok(NetworkFs::Refused);
        let allowed = Ok(NetworkFs::Allowed);
        for (value, want) in [
            (None, refused),
            (Some(""), refused),
            (Some("0"), refused),
            (Some("1"), allowed),
            (Some("yes"), Err("\"yes\"")),
            (Some("true"), Err("\"true\"")),
            (Some(" 1"), Err("\" 1\"")),
            (Some("01"), Err("\"01\"")),
            (Some("no"), Err("\"no\"")),
        ] {
            let got = NetworkFs::from_env(value.map(OsStr::new));
            match (&got, &want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{value:?}"),
                (Err(message), Err(shown)) => assert!(
                    message.starts_with("DISTLOCK_ALLOW_NETWORK_FS must be 1 ")
                        && message.ends_with(shown),
                    "{value:?}: {message}"
                ),
                _ => panic!("{value:?}: got {got:?}, want {want:?}"),
            }
        }
        // The allowance goes with a SQLite store, named or by default.
        for db in [Some("locks.db"), None] {
            let Ok(Location::Sqlite(_, _, network_fs)) = Location::resolve(db, NetworkFs::Allowed)
            else {
                // Without --db, a machine without HOME has no default store to look at.
                assert!(db.is_none(), "{db:?}");
                continue;
            };
            assert_eq!(network_fs, NetworkFs::Allowed, "{db:?}");
        }
    }

    #[test]
    fn a_stores_names_are_its_path_or_its_logins_and_hosts_longest_first() {
        let at = |db: &str| Location::resolve(Some(db), NetworkFs::Refused).unwrap();
        let here = std::env::current_dir().unwrap();
        let cases: Vec<(&str, Vec<String>)> = vec![
            (
                "locks.db",
                vec![
                    here.join("locks.db").display().to_string(),
                    "locks.db".to_owned(),
                ],
            ),
            (
                "/var/lib/distlock/locks.db",
                vec!["/var/lib/distlock/locks.db".to_owned()],
            ),
            (
                "postgres://app:secret@db.internal:6543/locks",
                vec!["app@db.internal:6543/locks".to_owned()],
            ),
            (
                "postgresql://app@h1,h2:5433/locks",
                vec![
                    "app@h1:5432,h2:5433/locks".to_owned(),
                    "app@h1:5432/locks".to_owned(),
                    "app@h2:5433/locks".to_owned(),
                ],
            ),
            ("http://127.0.0.1:7878", vec![]),
        ];
        for (db, names) in cases {
            assert_eq!(at(db).names(), names, "{db}");
        }
    }

    #[test]
    fn the_exported_db_is_absolute_for_a_file_and_unchanged_for_a_url() {
        let here = std::env::current_dir().expect("the current folder");
        for (given, exported) in [
            ("locks.db", here.join("locks.db")),
            ("./state/locks.db", here.join("state/locks.db")),
            // Kept as named: `..` is not collapsed (a symlink may stand before it).
            ("link/../locks.db", here.join("link/../locks.db")),
            (
                "/var/lib/distlock/locks.db",
                PathBuf::from("/var/lib/distlock/locks.db"),
            ),
        ] {
            let location =
                Location::Sqlite(PathBuf::from(given), Folders::AsUmask, NetworkFs::Refused);
            // Compared as strings: `Path` equality would overlook a `.` left in.
            assert_eq!(
                location.to_env_value(),
                exported.into_os_string(),
                "--db {given}"
            );
        }
        let url = "postgres://distlock@db.internal/ops";
        assert_eq!(
            Location::Postgres(url.to_owned()).to_env_value(),
            OsString::from(url)
        );
    }
}
