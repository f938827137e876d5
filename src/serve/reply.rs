//! An answer before it is sent ([`Reply`]): a lock command's own answer with the status its
//! exit code stands for ([`answered`]), or a [`Problem`] (bad input, a path that is no route).

use std::time::Duration;

use hyper::StatusCode;
use hyper::header::{HeaderName, HeaderValue};

use super::problem::Problem;
use crate::answer::Answer;
use crate::exit::Exit;
use crate::lock::Grant;
use crate::protocol::{Bad, Unrouted, grant_header};

/// The problem of a method on a path that is no route.
pub fn unrouted(unrouted: Unrouted) -> Problem {
    match unrouted {
        Unrouted::Bad(bad) => problem(&bad),
        Unrouted::NoSuchRoute(detail) => {
            Problem::new(StatusCode::NOT_FOUND, "no-such-route", detail)
        }
        Unrouted::MethodNotAllowed { detail, allow } => {
            Problem::new(StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed", detail)
                .allowing(allow)
        }
    }
}

/// The problem of bad input: 400 for a body that is not JSON or a path or query that is not
/// percent-encoded, 422 for a rule broken.
pub fn problem(bad: &Bad) -> Problem {
    match bad {
        Bad::Malformed(why) => Problem::new(StatusCode::BAD_REQUEST, "malformed-json", why.clone()),
        Bad::Encoding(why) => Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-percent-encoding",
            why.clone(),
        ),
        Bad::Invalid(why) => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
            why.clone(),
        ),
    }
}

/// An answer, before it is sent.
pub struct Reply {
    pub(super) status: StatusCode,
    pub(super) body: Vec<u8>,
    pub(super) kind: &'static str,
    /// A grant's `Distlock-Grant` ([`crate::protocol::GRANT_HEADER`]) and its
    /// `Distlock-Waited-Ms`, for a distlock client (`--db http://…`): the body is the
    /// command's own, which does not say.
    pub(super) grant: Option<(String, Duration)>,
    /// A 405's `Allow`: the methods the path takes.
    pub(super) allow: Option<&'static str>,
    /// Headers of its own (the dashboard's files: their policy and caching; a 429's
    /// `Retry-After`).
    pub(super) headers: Box<[(HeaderName, HeaderValue)]>,
}

impl Reply {
    pub(super) fn json(status: StatusCode, answer: &impl serde::Serialize) -> Reply {
        Reply {
            status,
            body: serde_json::to_vec(answer).unwrap_or_default(),
            kind: "application/json",
            grant: None,
            allow: None,
            headers: Box::default(),
        }
    }

    pub(super) fn empty(status: StatusCode) -> Reply {
        Reply {
            status,
            body: Vec::new(),
            kind: "application/json",
            grant: None,
            allow: None,
            headers: Box::default(),
        }
    }

    /// The same reply, saying how a grant came about (each tenure of it: one, or a lock set's
    /// in the members' order), and how long the request `waited` before the transaction that
    /// granted it began.
    pub(super) fn granted(self, tenures: &[Grant], waited: Duration) -> Reply {
        Reply {
            grant: Some((grant_header(tenures), waited)),
            ..self
        }
    }

    pub(super) fn text(body: String, kind: &'static str) -> Reply {
        Reply {
            status: StatusCode::OK,
            body: body.into_bytes(),
            kind,
            grant: None,
            allow: None,
            headers: Box::default(),
        }
    }
}

impl From<Problem> for Reply {
    fn from(problem: Problem) -> Reply {
        Reply {
            status: problem.status,
            body: problem.body(),
            kind: "application/problem+json",
            grant: None,
            allow: problem.allow,
            headers: Box::default(),
        }
    }
}

/// The answer of a lock command, with the status its exit code stands for: the objects of a
/// refusal go into a problem document.
pub fn answered(answer: &impl Answer, detail: impl FnOnce() -> String) -> Reply {
    let (status, kind) = match answer.exit() {
        Exit::Done | Exit::Busy => return Reply::json(StatusCode::OK, answer),
        Exit::NotHeld => (StatusCode::NOT_FOUND, "not-held"),
        Exit::Forbidden => (StatusCode::FORBIDDEN, "forbidden"),
        Exit::Mismatch => (StatusCode::CONFLICT, "mismatch"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    };
    Problem::new(status, kind, detail()).with(answer).into()
}
