//! The server's tokens (`distlock serve --tokens FILE`): who may call it, on which resources,
//! and who is an operator. The file keeps each token's name, the SHA-256 of its secret (never
//! the secret), the resource prefixes it may use (or all of them) and whether it is an
//! operator:
//!
//! ```json
//! {"tokens": [
//!   {"name": "ci-deploy", "sha256": "9f86…", "resources": ["deploy/", "build/"]},
//!   {"name": "ops", "sha256": "2c26…", "resources": "*", "operator": true}
//! ]}
//! ```
//!
//! `distlock token add` makes a token: a random secret of 256 bits, printed once, and its
//! entry in the file. A secret that long needs no salt and no slow hash: it cannot be guessed,
//! and the hash only keeps a copy of the file from being a list of secrets. The lookup is by
//! the hash, so a caller learns nothing from how long a refusal takes but about the hash of
//! what it sent.
//!
//! The file is trusted only as `ssh` trusts `authorized_keys` ([`trust`]): a regular file that
//! only its owner, the server's user or root, may write, in folders that only their owners
//! may write. A prefix is never empty ([`check_prefix`], the same rule as `token add`'s).

mod trust;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use anyhow::{Context, Result, bail};
use ring::rand::SecureRandom;
use serde::{Deserialize, Serialize};

use super::reread::Reread;
use crate::error::Error;
use crate::lock::shown;
use crate::lock::{Resource, TokenName};
use trust::Owners;

/// The secrets of tokens begin so, to be told apart from other credentials in a script.
const SECRET_PREFIX: &str = "dl_";

/// The file as it is written.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tokens: Vec<Entry>,
}

impl File {
    /// Reads and parses the file at `path` once it and its folders are found trustworthy, their
    /// owners as `owners` says ([`trust::read`]).
    fn read(path: &Path, owners: Owners) -> Result<File> {
        let text = trust::read(path, owners)?;
        serde_json::from_slice(&text)
            .with_context(|| format!("the tokens file {} is not valid", path.display()))
    }
}

/// Checks a resource prefix of a token: the start of a resource name, so not empty (`"*"`, or
/// `--all-resources`, is every resource), at most 255 bytes, and no control characters. The
/// one rule for `token add --prefix` and for the prefixes of a tokens file.
///
/// # Errors
///
/// A message naming the rule that `prefix` breaks.
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Err(
            "a prefix must not be empty (every resource is --all-resources, \"*\" in the file)"
                .into(),
        );
    }
    if prefix.len() > crate::lock::MAX_NAME_BYTES || prefix.chars().any(char::is_control) {
        return Err(format!(
            "a prefix is the start of a resource name: at most {} bytes, no control characters",
            crate::lock::MAX_NAME_BYTES
        ));
    }
    Ok(())
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: TokenName,
    /// The SHA-256 of the secret, 64 lowercase hex digits.
    sha256: String,
    resources: Resources,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    operator: bool,
}

/// Which resources a token may use: `"*"` (all), or those that begin with one of the prefixes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Resources {
    All(AllResources),
    Prefixes(Vec<String>),
}

/// The `"*"` of [`Resources::All`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AllResources {
    #[serde(rename = "*")]
    All,
}

impl Resources {
    fn covers(&self, resource: &str) -> bool {
        match self {
            Resources::All(_) => true,
            Resources::Prefixes(prefixes) => prefixes.iter().any(|p| resource.starts_with(p)),
        }
    }
}

/// One token, as the server knows it once its caller proved the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub name: TokenName,
    resources: Resources,
    /// May `break` any lock, and sees every resource (`status`, `list`, `log`).
    pub operator: bool,
    /// The SHA-256 of the secret.
    hash: [u8; 32],
}

impl Token {
    /// Whether the token may use `resource`: take, renew and release its locks, and read it.
    pub fn may_use(&self, resource: &Resource) -> bool {
        self.resources.covers(resource.as_str())
    }

    /// Whether the token may read `resource`: one it may use, or any for an operator's.
    pub fn may_see(&self, resource: &Resource) -> bool {
        self.operator || self.may_use(resource)
    }
}

/// The tokens of a file, by the hash of their secrets.
#[derive(Debug, Default)]
pub struct Tokens {
    by_hash: HashMap<[u8; 32], Arc<Token>>,
}

impl Tokens {
    /// Reads and checks the file at `path`.
    ///
    /// # Errors
    ///
    /// One line saying what is wrong with the file: unreadable, not a regular file, writable
    /// by others than its owner or in a folder that is, not the server's user's or root's, not
    /// the format above, a name or a hash twice, a hash that is not 64 hex digits, an empty
    /// prefix list or a prefix that breaks [`check_prefix`].
    pub fn load(path: &Path) -> Result<Tokens> {
        let file = File::read(path, Owners::server())?;
        let mut tokens = Tokens::default();
        let mut names = std::collections::HashSet::new();
        for entry in file.tokens {
            let named = entry.name.clone();
            let what = || format!("the tokens file {}, token {named}", path.display());
            let hash = parse_hash(&entry.sha256).with_context(what)?;
            if let Resources::Prefixes(prefixes) = &entry.resources {
                if prefixes.is_empty() {
                    bail!(
                        "{}: \"resources\" lists no prefix (\"*\" is every resource)",
                        what()
                    );
                }
                for prefix in prefixes {
                    check_prefix(prefix).map_err(|why| {
                        anyhow::anyhow!("{}: prefix {}: {why}", what(), shown(prefix))
                    })?;
                }
            }
            if !names.insert(entry.name.clone()) {
                bail!("{}: the name is given twice", what());
            }
            let token = Token {
                name: entry.name,
                resources: entry.resources,
                operator: entry.operator,
                hash,
            };
            if tokens.by_hash.insert(hash, Arc::new(token)).is_some() {
                bail!("{}: the same secret's hash is given twice", what());
            }
        }
        Ok(tokens)
    }

    /// Whether `token` is still one of these (the same name and secret): a token taken out of
    /// the file is no longer, after SIGHUP.
    pub fn knows(&self, token: &Token) -> bool {
        self.by_hash
            .get(&token.hash)
            .is_some_and(|known| known.name == token.name)
    }

    /// The token whose secret is `secret`.
    pub fn find(&self, secret: &str) -> Option<Arc<Token>> {
        self.by_hash.get(&sha256(secret.as_bytes())).cloned()
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut hash = [0; 32];
    hash.copy_from_slice(digest.as_ref());
    hash
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

fn parse_hash(text: &str) -> Result<[u8; 32]> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("\"sha256\" must be 64 hex digits");
    }
    let mut hash = [0; 32];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16)?;
    }
    Ok(hash)
}

/// The tokens file of a running server: what it held when last read, replaced whole when
/// SIGHUP rereads it, and kept when the file cannot be used.
pub struct TokensFile {
    path: PathBuf,
    current: RwLock<Arc<Tokens>>,
}

impl TokensFile {
    /// Reads the file at `path` ([`Tokens::load`]).
    ///
    /// # Errors
    ///
    /// As [`Tokens::load`].
    pub fn load(path: PathBuf) -> Result<TokensFile> {
        let tokens = Tokens::load(&path)?;
        Ok(TokensFile {
            path,
            current: RwLock::new(Arc::new(tokens)),
        })
    }

    /// The tokens as they are now.
    pub fn now(&self) -> Arc<Tokens> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Reread for TokensFile {
    fn what(&self) -> String {
        format!("tokens ({})", self.path.display())
    }

    fn reread(&self) -> Result<(), String> {
        let tokens = Tokens::load(&self.path).map_err(|err| format!("{err:#}"))?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(tokens);
        Ok(())
    }
}

/// A token that `distlock token add` made: its secret, shown once.
#[derive(Debug, Serialize)]
pub struct Made {
    pub token: TokenName,
    pub secret: String,
    pub file: String,
}

impl crate::answer::Answer for Made {
    fn exit(&self) -> crate::exit::Exit {
        crate::exit::Exit::Done
    }

    fn text(&self) -> String {
        format!(
            "token {} added to {}; its secret, shown only now: {}",
            self.token, self.file, self.secret
        )
    }
}

/// Makes a token named `name` and adds it to the file at `path` (made, readable by its owner
/// only, when missing), then has `show` show its secret. The file is replaced whole (written
/// beside it, then renamed), so a server that rereads it at SIGHUP never sees half of it. When
/// `show` fails, the token is taken out of the file again before the folder's lock is let go:
/// the file never keeps a token whose secret nobody saw.
///
/// The file and its folders must be such that a server would trust them ([`trust`], their
/// owners aside: `token add` may run as root for a server of another user): a token added to
/// a file that the server refuses, or that others may rewrite, would be no token at all.
///
/// # Errors
///
/// A usage error for a file that is not a tokens file, already has the name, is not a regular
/// file or may be written by others than its owner (or its folders may), or a prefix that
/// breaks [`check_prefix`]; a system error when there is no randomness or the file cannot be
/// written; `show`'s error, once the token is taken out again.
pub fn add(
    path: &Path,
    name: TokenName,
    resources: Resources,
    operator: bool,
    show: impl FnOnce(&Made) -> Result<(), Error>,
) -> Result<Made, Error> {
    let usage = |err: anyhow::Error| Error::Usage(format!("{err:#}"));
    if let Resources::Prefixes(prefixes) = &resources {
        for prefix in prefixes {
            check_prefix(prefix).map_err(Error::Usage)?;
        }
    }
    // A link is followed, so that the file it names is the one that changes.
    let target = followed(path).map_err(usage)?;
    let folder = match target.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // One `token add` at a time per folder: each reads the file as the one before left it.
    let _held = lock_folder(&folder).map_err(Error::System)?;
    let before = match std::fs::metadata(&target) {
        Ok(meta) => Some(meta),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => {
            return Err(usage(anyhow::Error::new(err).context(format!(
                "cannot read the tokens file {}",
                path.display()
            ))));
        }
    };
    let mut file = match &before {
        // The file's checks take in its folders; a new file's folders are checked alone.
        Some(_) => File::read(path, Owners::Any).map_err(usage)?,
        None => {
            let real = std::fs::canonicalize(&folder)
                .with_context(|| format!("cannot find the folder {}", folder.display()))
                .map_err(usage)?;
            trust::folders(&real, path, Owners::Any).map_err(usage)?;
            File::default()
        }
    };
    let kept = file.clone();
    if file.tokens.iter().any(|entry| entry.name == name) {
        return Err(Error::Usage(format!(
            "the tokens file {} already has a token named {name}",
            path.display()
        )));
    }
    let mut random = [0; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut random)
        .map_err(|_| {
            Error::System(anyhow::anyhow!(
                "the system gave no randomness for a secret"
            ))
        })?;
    let secret = format!("{SECRET_PREFIX}{}", hex(&random));
    file.tokens.push(Entry {
        name: name.clone(),
        sha256: hex(&sha256(secret.as_bytes())),
        resources,
        operator,
    });
    write_whole(&target, &file, before.as_ref()).map_err(Error::System)?;
    let made = Made {
        token: name,
        secret,
        file: path.display().to_string(),
    };
    if let Err(unseen) = show(&made) {
        // Nobody saw the secret: the token goes out of the file again, as it was before.
        let undone = match &before {
            Some(before) => write_whole(&target, &kept, Some(before)),
            None => std::fs::remove_file(&target)
                .with_context(|| format!("cannot remove the tokens file {}", path.display())),
        };
        return Err(match undone {
            Ok(()) => unseen,
            Err(stuck) => Error::System(anyhow::anyhow!(
                "{unseen}, and the token {} whose secret nobody saw is still in the file: \
                 {stuck:#}; take it out by hand",
                made.token
            )),
        });
    }
    Ok(made)
}

/// Whether a secret written to stdout would reach anyone: stdout must not be closed (`>&-`,
/// which Rust's runtime opens to /dev/null before `main`) nor /dev/null itself.
///
/// # Errors
///
/// [`Error::Output`] when it is one of them, or cannot be looked at.
pub fn check_secret_reaches_stdout() -> Result<(), Error> {
    use nix::sys::stat::{SFlag, fstat, stat};
    let out = fstat(std::io::stdout()).map_err(|errno| Error::Output(errno.into()))?;
    let is_null = stat("/dev/null").is_ok_and(|null| {
        SFlag::from_bits_truncate(out.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR
            && out.st_rdev == null.st_rdev
    });
    if is_null {
        return Err(Error::Output(std::io::Error::other(
            "it is closed or /dev/null, where the new token's secret would be lost; no token \
             was added",
        )));
    }
    Ok(())
}

/// `path`, its symbolic links followed (a dangling one to the file it would make).
fn followed(path: &Path) -> Result<PathBuf> {
    let mut at = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let to = std::fs::read_link(&at)
                    .with_context(|| format!("cannot read the link {}", at.display()))?;
                at = match at.parent() {
                    Some(folder) => folder.join(to),
                    None => to,
                };
            }
            _ => return Ok(at),
        }
    }
    anyhow::bail!("{}: too many levels of symbolic links", path.display())
}

/// An exclusive `flock` on `folder`, held until dropped.
fn lock_folder(folder: &Path) -> Result<nix::fcntl::Flock<std::fs::File>> {
    let opened = std::fs::File::open(folder)
        .with_context(|| format!("cannot open the folder {}", folder.display()))?;
    nix::fcntl::Flock::lock(opened, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| anyhow::Error::new(errno))
        .with_context(|| format!("cannot lock the folder {}", folder.display()))
}

/// Writes `file` whole at `path`: beside it first, then renamed over it, with the owner and
/// mode the file had (`before`), or readable by its owner only when it is new.
fn write_whole(path: &Path, file: &File, before: Option<&std::fs::Metadata>) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut text = serde_json::to_vec_pretty(file)?;
    text.push(b'\n');
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    let mut temporary = name.to_owned();
    temporary.push(format!(".{}.tmp", std::process::id()));
    let temporary = path.with_file_name(temporary);
    let written = (|| {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        if let Some(before) = before {
            // Kept as it was: a server reading the file as another user still can. Only root
            // may give a file away; anyone else keeps their own.
            let _ = std::os::unix::fs::fchown(&out, Some(before.uid()), Some(before.gid()));
            out.set_permissions(std::fs::Permissions::from_mode(before.mode() & 0o7777))?;
        }
        out.write_all(&text)?;
        out.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.with_context(|| format!("cannot write the tokens file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<Tokens> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        std::fs::write(&path, text).unwrap();
        Tokens::load(&path)
    }

    const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_tokens_file_is_read_strictly() {
        // (file, the error's words, or "" when it loads)
        let cases = [
            (r#"{"tokens":[]}"#, ""),
            (
                &format!(r#"{{"tokens":[{{"name":"ci","sha256":"{HASH}","resources":["a/"]}}]}}"#),
                "",
            ),
            (
                &format!(
                    r#"{{"tokens":[{{"name":"ops","sha256":"{HASH}","resources":"*","operator":true}}]}}"#
                ),
                "",
            ),
            ("", "not valid"),
            ("[]", "not valid"),
            (r#"{"tokens":[],"extra":1}"#, "not valid"),
            (
                &format!(r#"{{"tokens":[{{"name":"ci","sha256":"{HASH}","resources":"all"}}]}}"#),
                "not valid",
            ),
            (
                &format!(r#"{{"tokens":[{{"name":"c i","sha256":"{HASH}","resources":"*"}}]}}"#),
                "not valid",
            ),
            (
                &format!(
                    r#"{{"tokens":[{{"name":"ci","sha256":"{HASH}","resources":"*","secret":"x"}}]}}"#
                ),
                "not valid",
            ),
            (
                r#"{"tokens":[{"name":"ci","sha256":"abc","resources":"*"}]}"#,
                "64 hex digits",
            ),
            (
                &format!(r#"{{"tokens":[{{"name":"ci","sha256":"{HASH}","resources":[]}}]}}"#),
                "no prefix",
            ),
            (
                &format!(r#"{{"tokens":[{{"name":"ci","sha256":"{HASH}","resources":[""]}}]}}"#),
                "token ci: prefix : a prefix must not be empty",
            ),
            (
                &format!(
                    r#"{{"tokens":[{{"name":"ci","sha256":"{HASH}","resources":["a/",""]}}]}}"#
                ),
                "must not be empty",
            ),
            (
                &format!(
                    r#"{{"tokens":[{{"name":"ci","sha256":"{HASH}","resources":["a\u0007"]}}]}}"#
                ),
                "prefix a\\u{7}: a prefix is the start of a resource name",
            ),
            (
                &format!(
                    r#"{{"tokens":[{{"name":"ci","sha256":"{HASH}","resources":["{}"]}}]}}"#,
                    "x".repeat(256)
                ),
                "at most 255 bytes",
            ),
            (
                &format!(
                    r#"{{"tokens":[{{"name":"ci","sha256":"{HASH}","resources":"*"}},{{"name":"ci","sha256":"{}","resources":"*"}}]}}"#,
                    "0".repeat(64)
                ),
                "twice",
            ),
            (
                &format!(
                    r#"{{"tokens":[{{"name":"a","sha256":"{HASH}","resources":"*"}},{{"name":"b","sha256":"{HASH}","resources":"*"}}]}}"#
                ),
                "twice",
            ),
        ];
        for (text, words) in cases {
            match load_text(text) {
                Ok(_) => assert_eq!(words, "", "{text} loaded"),
                Err(err) => {
                    let err = format!("{err:#}");
                    assert!(!words.is_empty() && err.contains(words), "{text}: {err}");
                }
            }
        }
    }

    #[test]
    fn a_token_whose_secret_cannot_be_shown_is_taken_out_of_the_file_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let name = |n: &str| TokenName::parse(n).unwrap();
        let all = || Resources::All(AllResources::All);
        let failing = |_: &Made| Err(Error::Output(std::io::Error::from_raw_os_error(28)));
        // A new file is not left behind.
        let err = add(&path, name("a"), all(), false, failing).unwrap_err();
        assert!(matches!(err, Error::Output(_)), "{err}");
        assert!(!path.exists(), "no file whose token nobody saw");
        // An old one is left as it was, its mode too.
        add(&path, name("a"), all(), false, |_| Ok(())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let before = std::fs::read(&path).unwrap();
        add(&path, name("b"), all(), true, failing).unwrap_err();
        assert_eq!(std::fs::read(&path).unwrap(), before, "b taken out again");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        // What `show` is shown is the token that stays.
        let mut shown = None;
        let made = add(&path, name("b"), all(), true, |made| {
            shown = Some(made.secret.clone());
            Ok(())
        })
        .unwrap();
        assert_eq!(shown.as_deref(), Some(made.secret.as_str()));
        assert!(Tokens::load(&path).unwrap().find(&made.secret).is_some());
        // An empty prefix is refused by `add` as by the file's reader, the file unchanged.
        let before = std::fs::read(&path).unwrap();
        let empty = add(
            &path,
            name("c"),
            Resources::Prefixes(vec![String::new()]),
            false,
            |_| Ok(()),
        );
        assert!(matches!(empty, Err(Error::Usage(_))));
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }

    #[test]
    fn a_made_token_is_found_by_its_secret_and_scoped_to_its_prefixes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let prefixes = Resources::Prefixes(vec!["deploy/".into(), "build".into()]);
        let ci = add(
            &path,
            TokenName::parse("ci").unwrap(),
            prefixes,
            false,
            |_| Ok(()),
        )
        .unwrap();
        let ops = add(
            &path,
            TokenName::parse("ops").unwrap(),
            Resources::All(AllResources::All),
            true,
            |_| Ok(()),
        )
        .unwrap();
        assert!(
            ci.secret.starts_with("dl_") && ci.secret.len() == 67,
            "{}",
            ci.secret
        );
        assert_ne!(ci.secret, ops.secret);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains(&ci.secret),
            "the file keeps no secret: {text}"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "readable by its owner only");
        let again = add(
            &path,
            TokenName::parse("ci").unwrap(),
            Resources::All(AllResources::All),
            false,
            |_| Ok(()),
        );
        assert!(format!("{:#}", again.unwrap_err()).contains("already has"));

        let tokens = Tokens::load(&path).unwrap();
        assert_eq!(tokens.len(), 2);
        let found = tokens.find(&ci.secret).expect("ci's secret");
        assert_eq!(found.name.as_str(), "ci");
        let r = |name: &str| Resource::parse(name).unwrap();
        // (resource, may ci use it)
        for (resource, allowed) in [
            ("deploy/prod", true),
            ("deploy/", true),
            ("build", true),
            ("builds-nightly", true),
            ("deploy", false),
            ("Deploy/prod", false),
            ("other", false),
        ] {
            assert_eq!(found.may_use(&r(resource)), allowed, "{resource}");
        }
        let ops = tokens.find(&ops.secret).expect("ops's secret");
        assert!(ops.operator && ops.may_use(&r("anything")) && ops.may_see(&r("anything")));
        assert!(!found.may_see(&r("other")) && found.may_see(&r("deploy/x")));
        assert!(tokens.knows(&found) && tokens.knows(&ops));
        for wrong in [
            "",
            "dl_",
            &ci.secret[..66],
            &format!("{} ", ci.secret),
            "Bearer x",
        ] {
            assert!(tokens.find(wrong).is_none(), "{wrong:?}");
        }
    }
}
