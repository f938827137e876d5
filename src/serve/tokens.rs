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
use crate::lock::{Resource, TokenName};

/// The secrets of tokens begin so, to be told apart from other credentials in a script.
const SECRET_PREFIX: &str = "dl_";

/// The file as it is written.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tokens: Vec<Entry>,
}

impl File {
    /// Reads and parses the file at `at`, which the user named `named` (a link to it, say).
    fn read(at: &Path, named: &Path) -> Result<File> {
        let text = std::fs::read(at)
            .with_context(|| format!("cannot read the tokens file {}", named.display()))?;
        serde_json::from_slice(&text)
            .with_context(|| format!("the tokens file {} is not valid", named.display()))
    }
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
    /// One line saying what is wrong with the file: unreadable, not the format above, a
    /// name or a hash twice, a hash that is not 64 hex digits, an empty prefix list.
    pub fn load(path: &Path) -> Result<Tokens> {
        let file = File::read(path, path)?;
        let mut tokens = Tokens::default();
        let mut names = std::collections::HashSet::new();
        for entry in file.tokens {
            let named = entry.name.clone();
            let what = || format!("the tokens file {}, token {named}", path.display());
            let hash = parse_hash(&entry.sha256).with_context(what)?;
            if matches!(&entry.resources, Resources::Prefixes(p) if p.is_empty()) {
                bail!(
                    "{}: \"resources\" lists no prefix (\"*\" is every resource)",
                    what()
                );
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
/// only, when missing). The file is replaced whole (written beside it, then renamed), so a
/// server that rereads it at SIGHUP never sees half of it.
///
/// # Errors
///
/// A usage error for a file that is not a tokens file or already has the name; a system error
/// when there is no randomness or the file cannot be written.
pub fn add(
    path: &Path,
    name: TokenName,
    resources: Resources,
    operator: bool,
) -> Result<Made, Error> {
    let usage = |err: anyhow::Error| Error::Usage(format!("{err:#}"));
    // A link is followed, so that the file it names is the one that changes.
    let target = followed(path).map_err(usage)?;
    let folder = match target.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // One `token add` at a time per folder: each reads the file as the one before left it.
    let _held = lock_folder(&folder).map_err(Error::System)?;
    let before = match std::fs::metadata(&target) {
        Ok(meta) if !meta.is_file() => {
            return Err(Error::Usage(format!(
                "the tokens file {} is not a regular file",
                path.display()
            )));
        }
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
        None => File::default(),
        Some(_) => File::read(&target, path).map_err(usage)?,
    };
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
    Ok(Made {
        token: name,
        secret,
        file: path.display().to_string(),
    })
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
    fn a_made_token_is_found_by_its_secret_and_scoped_to_its_prefixes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let prefixes = Resources::Prefixes(vec!["deploy/".into(), "build".into()]);
        let ci = add(&path, TokenName::parse("ci").unwrap(), prefixes, false).unwrap();
        let ops = add(
            &path,
            TokenName::parse("ops").unwrap(),
            Resources::All(AllResources::All),
            true,
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
