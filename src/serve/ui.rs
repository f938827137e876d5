//! The dashboard (`GET /ui/`, docs/src/hosts/dashboard.md): one page, its ES modules, its style
//! and its icon, built into the binary and served as they are — no framework, no build step,
//! nothing fetched from elsewhere. Each file is answered with a Content-Security-Policy that
//! lets the page run only its own scripts and styles and reach only this server, and with an
//! `ETag`, so that a browser keeps it and asks again only whether it changed (304).
//!
//! The page holds no data: it reads the API (`/locks`, `/queues`, `/log`, `/metrics`) with the
//! token it is given, which it sends as `Authorization: Bearer`, so its files are served to
//! anyone, as `/health` is, and what it shows is what that token may read. Nothing of it is
//! read until a request asks for it: a CLI command never pays for it.

use hyper::StatusCode;
use hyper::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, ETAG, HeaderMap, HeaderName, HeaderValue,
    IF_NONE_MATCH, REFERRER_POLICY,
};

use super::problem::Problem;
use super::reply::Reply;

/// The policy of every file of the dashboard: its own scripts, styles and images (and inline
/// `data:` images), requests to this server only, and nothing else — no inline script, no
/// frame around it, no form sent anywhere.
pub const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                          img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
                          frame-ancestors 'none'; form-action 'none'";

/// One file of the page: its name under `/ui/` (the page itself: empty), its type, its bytes.
struct File {
    name: &'static str,
    kind: &'static str,
    body: &'static str,
}

const SCRIPT: &str = "text/javascript; charset=utf-8";

const FILES: &[File] = &[
    File {
        name: "",
        kind: "text/html; charset=utf-8",
        body: include_str!("ui/index.html"),
    },
    File {
        name: "style.css",
        kind: "text/css; charset=utf-8",
        body: include_str!("ui/style.css"),
    },
    File {
        name: "icon.svg",
        kind: "image/svg+xml",
        body: include_str!("ui/icon.svg"),
    },
    File {
        name: "app.js",
        kind: SCRIPT,
        body: include_str!("ui/app.js"),
    },
    File {
        name: "api.js",
        kind: SCRIPT,
        body: include_str!("ui/api.js"),
    },
    File {
        name: "dom.js",
        kind: SCRIPT,
        body: include_str!("ui/dom.js"),
    },
    File {
        name: "locks.js",
        kind: SCRIPT,
        body: include_str!("ui/locks.js"),
    },
    File {
        name: "queues.js",
        kind: SCRIPT,
        body: include_str!("ui/queues.js"),
    },
    File {
        name: "timeline.js",
        kind: SCRIPT,
        body: include_str!("ui/timeline.js"),
    },
    File {
        name: "health.js",
        kind: SCRIPT,
        body: include_str!("ui/health.js"),
    },
];

/// Whether `path` is the dashboard's (`/ui`, `/ui/…`): served without a token.
pub(super) fn is_file(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// The request's `If-None-Match`, when it has one.
pub(super) fn validator(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(IF_NONE_MATCH)?;
    value.to_str().ok().map(str::to_owned)
}

/// `GET /ui/{name}` (the page: an empty name): the file, or 304 when the browser's copy
/// (`validator`, its `If-None-Match`) is this one; 404 for a name that is no file.
pub(super) fn file(name: &str, validator: Option<&str>) -> Reply {
    let name = if name == "index.html" { "" } else { name };
    let Some(file) = FILES.iter().find(|file| file.name == name) else {
        return Problem::new(
            StatusCode::NOT_FOUND,
            "no-such-route",
            format!("the dashboard has no file {name:?}"),
        )
        .into();
    };
    let tag = etag(file.body);
    let fresh = validator.is_some_and(|given| {
        given
            .split(',')
            .any(|one| one.trim() == tag || one.trim() == "*")
    });
    let mut reply = if fresh {
        let mut reply = Reply::text(String::new(), file.kind);
        reply.status = StatusCode::NOT_MODIFIED;
        reply
    } else {
        Reply::text(file.body.to_owned(), file.kind)
    };
    reply.headers = headers(&tag).into_boxed_slice();
    reply
}

/// The headers of every file: the policy, no referrer sent on, kept but asked about again.
fn headers(tag: &str) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = vec![
        (CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY)),
        (REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    if let Ok(tag) = HeaderValue::from_str(tag) {
        headers.push((ETAG, tag));
    }
    headers
}

/// A strong validator of `body`: its 64-bit FNV-1a hash, quoted. The files change only with
/// the binary, so a browser asks again and is told 304 until distlock is upgraded.
fn etag(body: &str) -> String {
    let hash = body.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("\"{hash:016x}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_has_its_type_and_the_policy_and_a_validator_that_answers_304() {
        // (name asked, status, type)
        let cases = [
            ("", 200, "text/html; charset=utf-8"),
            ("index.html", 200, "text/html; charset=utf-8"),
            ("style.css", 200, "text/css; charset=utf-8"),
            ("app.js", 200, SCRIPT),
            ("timeline.js", 200, SCRIPT),
            ("icon.svg", 200, "image/svg+xml"),
            ("nope.js", 404, "application/problem+json"),
            ("..%2Fapi.rs", 404, "application/problem+json"),
        ];
        for (name, status, kind) in cases {
            let reply = file(name, None);
            assert_eq!(reply.status.as_u16(), status, "{name}");
            assert_eq!(reply.kind, kind, "{name}");
            if status != 200 {
                continue;
            }
            let policy = reply
                .headers
                .iter()
                .find(|(header, _)| *header == CONTENT_SECURITY_POLICY);
            assert_eq!(
                policy.map(|(_, value)| value.to_str().unwrap()),
                Some(POLICY)
            );
            let (_, tag) = reply
                .headers
                .iter()
                .find(|(header, _)| *header == ETAG)
                .expect("an ETag");
            let tag = tag.to_str().unwrap().to_owned();
            let again = file(name, Some(&tag));
            assert_eq!(again.status, StatusCode::NOT_MODIFIED, "{name}");
            assert!(again.body.is_empty());
            let other = file(name, Some("\"0000000000000000\", W/\"x\""));
            assert_eq!(other.status, StatusCode::OK, "{name}");
        }
        // Every file of the folder is served, and only those.
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/serve/ui");
        let mut on_disk: Vec<String> = std::fs::read_dir(folder)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut served: Vec<String> = FILES
            .iter()
            .map(|file| match file.name {
                "" => "index.html".to_owned(),
                name => name.to_owned(),
            })
            .collect();
        served.sort();
        assert_eq!(served, on_disk);
    }

    #[test]
    fn no_file_of_the_page_runs_inline_script_or_writes_html() {
        for file in FILES {
            for banned in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(
                    !file.body.contains(banned),
                    "/ui/{} uses {banned}",
                    file.name
                );
            }
        }
        let page = FILES[0].body;
        assert!(!page.contains("<script>"), "no inline script");
        assert!(!page.contains("style="), "no inline style");
        assert!(!page.contains("://"), "nothing from elsewhere");
    }
}
