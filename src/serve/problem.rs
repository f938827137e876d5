//! Every answer but a success: a problem document (RFC 9457, `application/problem+json`) with
//! `type`, `title`, `status` and `detail`. Where the command line prints an object for the same
//! outcome (a lock not held, another owner's, a mode mismatch), the document carries that
//! object's members too, so a client loses nothing by reading the problem instead.

use hyper::StatusCode;
use serde_json::{Map, Value};

/// A problem, before it is sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub status: StatusCode,
    /// A short name for the kind of problem (`not-held`, `forbidden`, …): the document's
    /// `type`, a URI reference relative to the server.
    pub kind: &'static str,
    pub detail: String,
    /// The command line's object for the same outcome, when there is one.
    pub members: Map<String, Value>,
    /// The methods a path takes, for the `Allow` header of a 405 (RFC 9110).
    pub allow: Option<&'static str>,
}

impl Problem {
    pub fn new(status: StatusCode, kind: &'static str, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            kind,
            detail: detail.into(),
            members: Map::new(),
            allow: None,
        }
    }

    /// The same problem, answered with `Allow: {methods}`.
    pub fn allowing(self, methods: &'static str) -> Problem {
        Problem {
            allow: Some(methods),
            ..self
        }
    }

    /// The same problem, carrying `answer`'s members (its own keys win over the answer's).
    pub fn with(mut self, answer: &impl serde::Serialize) -> Problem {
        if let Ok(Value::Object(members)) = serde_json::to_value(answer) {
            self.members = members;
        }
        self
    }

    /// The document, one line of JSON: its four members, then the answer's (by name).
    pub fn body(&self) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct Document<'a> {
            #[serde(rename = "type")]
            kind: &'a str,
            title: &'a str,
            status: u16,
            detail: &'a str,
            #[serde(flatten)]
            members: Map<String, Value>,
        }
        let mut members = self.members.clone();
        for own in ["type", "title", "status", "detail"] {
            members.remove(own);
        }
        let document = Document {
            kind: self.kind,
            title: self.status.canonical_reason().unwrap_or("Error"),
            status: self.status.as_u16(),
            detail: &self.detail,
            members,
        };
        serde_json::to_vec(&document).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_carries_its_four_members_first_and_the_answers_after() {
        let plain = Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
            "bad ttl",
        );
        assert_eq!(
            String::from_utf8(plain.body()).unwrap(),
            r#"{"type":"invalid-request","title":"Unprocessable Entity","status":422,"detail":"bad ttl"}"#
        );
        let answer = serde_json::json!({"released": false, "resource": "r", "reason": "not_found", "status": "shadowed"});
        let carried =
            Problem::new(StatusCode::NOT_FOUND, "not-held", "r is not held").with(&answer);
        assert_eq!(
            String::from_utf8(carried.body()).unwrap(),
            r#"{"type":"not-held","title":"Not Found","status":404,"detail":"r is not held","reason":"not_found","released":false,"resource":"r"}"#
        );
    }
}
