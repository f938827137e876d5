//! One request to a distlock server, as it is sent ([`HttpRequest`], built from the API's
//! own types), and its answer as it is read ([`HttpAnswer`]): checked for what the server
//! refused (a token, a scope: exit 77), for a 5xx, and for an answer that is not a distlock
//! server's at all; a problem document's detail shown with no secret in it.

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::{Map, Value};

use super::ServerUrl;
use crate::protocol::{API_HEADER, GRANT_HEADER, Route, WAITED_HEADER};
use crate::store::Error;

/// One request, as it is sent (maybe again, if the server could not be reached).
#[derive(Clone)]
pub(super) struct HttpRequest {
    method: &'static str,
    path: String,
    /// The JSON body, serialized.
    body: Option<Vec<u8>>,
    timeout: Duration,
}

impl HttpRequest {
    /// A request without a body: `path` (with its query, if any) on `route`'s method.
    pub(super) fn new(route: &Route, path: String, timeout: Duration) -> HttpRequest {
        HttpRequest {
            method: route.method(),
            path,
            body: None,
            timeout,
        }
    }

    /// `body` sent on `route`.
    pub(super) fn with_body(
        route: &Route,
        body: &impl serde::Serialize,
        timeout: Duration,
    ) -> HttpRequest {
        HttpRequest {
            method: route.method(),
            path: route.path(),
            // A request body serializes to an object of strings and numbers: it cannot fail.
            body: Some(serde_json::to_vec(body).unwrap_or_default()),
            timeout,
        }
    }

    /// The same request, given `timeout`.
    pub(super) fn within(&self, timeout: Duration) -> HttpRequest {
        HttpRequest {
            timeout,
            ..self.clone()
        }
    }
}

/// Why a request got no answer.
pub(super) enum Failure {
    /// No connection was made: nothing was sent, so it may be sent again.
    NotConnected(String),
    /// Sent, or maybe sent: it may have been carried out, so it is not sent again.
    Sent(String),
}

pub(super) fn send(
    agent: &ureq::Agent,
    url: &ServerUrl,
    authorization: Option<&str>,
    call: &HttpRequest,
) -> Result<HttpAnswer, Failure> {
    let mut request = ureq::http::Request::builder()
        .method(call.method)
        .uri(format!("{}{}", url.as_str(), call.path));
    if let Some(authorization) = authorization {
        request = request.header("authorization", authorization);
    }
    let built = match &call.body {
        Some(body) => request
            .header("content-type", "application/json")
            .body(body.clone()),
        None => request.body(Vec::new()),
    }
    .map_err(|err| Failure::NotConnected(err.to_string()))?;
    let configured = agent
        .configure_request(built)
        .timeout_global(Some(call.timeout))
        .build();
    let sent = Instant::now();
    let mut response = agent.run(configured).map_err(|err| {
        let why = describe(&err);
        if connect_failure(&err) {
            Failure::NotConnected(why)
        } else {
            Failure::Sent(why)
        }
    })?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let distlock = response.headers().contains_key(API_HEADER);
    let grant = header(GRANT_HEADER);
    let waited = header(WAITED_HEADER)
        .and_then(|millis| millis.parse().ok())
        .map_or(Duration::ZERO, Duration::from_millis);
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(64 * 1024 * 1024)
        .read_to_vec()
        .map_err(|err| match err {
            ureq::Error::BodyExceedsLimit(_) => {
                Failure::Sent("its answer is larger than 64 MiB".to_owned())
            }
            other => Failure::Sent(describe(&other)),
        })?;
    Ok(HttpAnswer {
        status,
        distlock,
        secret: authorization
            .and_then(|a| a.strip_prefix("Bearer "))
            .map(str::to_owned),
        body,
        grant,
        decided: sent + waited,
        interrupted: false,
    })
}

/// Whether `err` came before anything was sent: no connection at all.
fn connect_failure(err: &ureq::Error) -> bool {
    match err {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
        ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve) => true,
        ureq::Error::Io(io) => matches!(
            io.kind(),
            ErrorKind::ConnectionRefused | ErrorKind::AddrNotAvailable | ErrorKind::NotFound
        ),
        _ => false,
    }
}

/// A failure in a few words (never a header: the token is in one).
fn describe(err: &ureq::Error) -> String {
    if let Some(words) = super::tls::explained(err) {
        return words.to_owned();
    }
    match err {
        ureq::Error::Timeout(_) => "the server did not answer in time".to_owned(),
        ureq::Error::ConnectionFailed => "the connection failed".to_owned(),
        ureq::Error::HostNotFound => "the host name was not found".to_owned(),
        ureq::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}

/// An answer.
pub(super) struct HttpAnswer {
    pub(super) status: u16,
    /// The answer has a distlock server's `Distlock-Api` header.
    pub(super) distlock: bool,
    /// The token the request carried, never to be shown.
    secret: Option<String>,
    pub(super) body: Vec<u8>,
    /// `Distlock-Grant` of a grant.
    pub(super) grant: Option<String>,
    /// The earliest moment the answer can have been decided: when the request was sent, plus
    /// what the server says it waited (`Distlock-Waited-Ms`) before it granted a lock.
    pub(super) decided: Instant,
    /// A long poll given up at an interrupt (no answer read).
    pub(super) interrupted: bool,
}

impl HttpAnswer {
    pub(super) fn interrupted() -> HttpAnswer {
        HttpAnswer {
            status: 0,
            distlock: true,
            secret: None,
            body: Vec::new(),
            grant: None,
            decided: Instant::now(),
            interrupted: true,
        }
    }

    /// The answer, or the failure it stands for: a refused token or scope (exit 77), a server
    /// error (5xx), or an answer from something that is not a distlock server (a mistyped
    /// port, a proxy's page), which is never read as a lock's outcome.
    pub(super) fn checked(self, url: &ServerUrl) -> Result<HttpAnswer, Error> {
        if !self.distlock {
            return Err(anyhow!(
                "{} answered {}, but not as a distlock server does (no Distlock-Api header): \
                 check the host and port in --db or DISTLOCK_DB",
                url.as_str(),
                self.status
            )
            .into());
        }
        let problem = || self.problem_detail().unwrap_or_default();
        match self.status {
            401 => Err(Error::NotAllowed(format!(
                "the distlock server {} refused the token: {}",
                url.as_str(),
                problem()
            ))),
            403 if self.problem_type().as_deref() == Some("not-allowed") => {
                Err(Error::NotAllowed(format!(
                    "the distlock server {} refused: {}",
                    url.as_str(),
                    problem()
                )))
            }
            500..=599 => Err(anyhow!(
                "the distlock server {} answered {}: {}",
                url.as_str(),
                self.status,
                problem()
            )
            .into()),
            _ => Ok(self),
        }
    }

    fn document(&self) -> Option<Map<String, Value>> {
        match serde_json::from_slice::<Value>(&self.body) {
            Ok(Value::Object(members)) => Some(members),
            _ => None,
        }
    }

    fn problem_type(&self) -> Option<String> {
        self.document()?.get("type")?.as_str().map(str::to_owned)
    }

    /// A problem document's `detail`, as a message may show it: one line, and no secret.
    fn problem_detail(&self) -> Option<String> {
        let document = self.document()?;
        let detail = document.get("detail")?.as_str()?;
        let detail = match &self.secret {
            Some(secret) => redacted(&detail.replace(secret.as_str(), "…")),
            None => redacted(detail),
        };
        Some(crate::lock::shown_line(&detail))
    }

    pub(super) fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|_| {
            anyhow!(
                "the server's answer ({}) is not one this distlock can read: is it a distlock \
                 server of another version?",
                self.status
            )
        })
    }

    /// A member of a problem document.
    pub(super) fn member<T: serde::de::DeserializeOwned + Default>(&self, name: &str) -> Result<T> {
        match self.document().and_then(|mut d| d.remove(name)) {
            Some(value) => serde_json::from_value(value)
                .map_err(|_| anyhow!("the server's {name:?} is not one this distlock can read")),
            None => Ok(T::default()),
        }
    }

    /// An answer that no request of distlock's expects. Only a problem document's detail is
    /// shown: a body of another kind may echo the request, token and all.
    pub(super) fn unexpected(&self, url: &ServerUrl) -> Error {
        let detail = self
            .problem_detail()
            .map_or_else(String::new, |detail| format!(": {detail}"));
        Error::Failed(anyhow!(
            "the distlock server {} answered {} unexpectedly{detail}",
            url.as_str(),
            self.status,
        ))
    }
}

/// `text` with every token secret in it (`dl_` and hex digits) cut to `dl_…`: a server's
/// detail may quote what it was sent.
fn redacted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("dl_") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 3..];
        // A secret is 64 hex digits: what follows them is not part of it.
        let hex = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_hexdigit())
                .len();
        let secret = hex.min(64);
        if secret >= 8 {
            out.push_str("dl_…");
        } else {
            out.push_str(&rest[at..at + 3 + secret]);
        }
        rest = &after[secret..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn secrets_are_cut_from_what_a_server_says() {
        let secret = format!("dl_{}", "0123456789abcdef".repeat(4));
        let cases = [
            (
                format!("unknown token {secret}"),
                "unknown token dl_…".to_owned(),
            ),
            (format!("{secret}{secret}"), "dl_…dl_…".to_owned()),
            (
                format!("Bearer {secret}, again: {secret}."),
                "Bearer dl_…, again: dl_….".to_owned(),
            ),
            (
                "dl_ short dl_12ab".to_owned(),
                "dl_ short dl_12ab".to_owned(),
            ),
            (
                "token other is not an operator's".to_owned(),
                "token other is not an operator's".to_owned(),
            ),
            ("dl_0123456789".to_owned(), "dl_…".to_owned()),
            (String::new(), String::new()),
        ];
        for (text, expected) in cases {
            assert_eq!(redacted(&text), expected, "{text}");
        }
    }
}
