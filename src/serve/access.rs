//! Who is calling, and what they may do: with `--tokens`, every request but `/health` and the
//! dashboard's files (`/ui/…`) shows a token (`Authorization: Bearer <secret>`), a missing or
//! unknown one is 401, and a request outside the token's resources, or a `break` by a token
//! that is not an operator's, is 403 `not-allowed`. The token proves the owner a request names ([`Caller::owner`]), so a tenure
//! belongs to the token that took it. Without `--tokens` every caller may do everything (and
//! the server listens on loopback only).

use std::sync::Arc;

use hyper::StatusCode;
use hyper::header::{AUTHORIZATION, HeaderMap};

use super::problem::Problem;
use super::tokens::{Token, Tokens};
use crate::lock::{Owner, Resource, TokenName};

/// The caller of one request.
#[derive(Debug, Clone)]
pub struct Caller(Option<Arc<Token>>);

impl Caller {
    /// A caller of a server without tokens: allowed everything, proving nothing.
    pub fn anyone() -> Caller {
        Caller(None)
    }

    /// `owner` as this caller proves it: with its token.
    pub fn owner(&self, owner: Owner) -> Owner {
        owner.with_token(self.0.as_ref().map(|token| token.name.clone()))
    }

    /// Whether the caller may use `resource` (read it included).
    pub fn may_use(&self, resource: &Resource) -> bool {
        self.0.as_ref().is_none_or(|token| token.may_use(resource))
    }

    /// Whether the caller may read `resource` (`status`; what `list` and `log` show).
    pub fn may_see(&self, resource: &Resource) -> bool {
        self.0.as_ref().is_none_or(|token| token.may_see(resource))
    }

    /// Whether the caller's token was taken out of the tokens file since the request came
    /// in (a SIGHUP reread it): a wait on its behalf then ends.
    pub fn revoked(&self, tokens: Option<&Tokens>) -> bool {
        match (&self.0, tokens) {
            (Some(token), Some(tokens)) => !tokens.knows(token),
            _ => false,
        }
    }

    /// Refuses a read of `resource` the caller may not see.
    pub fn check_see(&self, resource: &Resource) -> Result<(), Problem> {
        if self.may_see(resource) {
            Ok(())
        } else {
            self.check(resource)
        }
    }

    /// The token's name, for the log line.
    pub fn name(&self) -> Option<&str> {
        self.0.as_ref().map(|token| token.name.as_str())
    }

    /// The token's name, for the history (who broke a lock).
    pub fn token_name(&self) -> Option<TokenName> {
        self.0.as_ref().map(|token| token.name.clone())
    }

    /// Refuses a request on `resource` outside the caller's resources.
    pub fn check(&self, resource: &Resource) -> Result<(), Problem> {
        if self.may_use(resource) {
            Ok(())
        } else {
            Err(not_allowed(format!(
                "token {} may not use resource {resource}",
                self.name().unwrap_or_default()
            )))
        }
    }

    /// Refuses a request on `resources` (a lock set's members) when one of them is outside the
    /// caller's resources, naming the first such.
    pub fn check_all(&self, resources: &[Resource]) -> Result<(), Problem> {
        resources
            .iter()
            .try_for_each(|resource| self.check(resource))
    }

    /// Refuses a `break` by a token that is not an operator's.
    pub fn check_operator(&self) -> Result<(), Problem> {
        match &self.0 {
            Some(token) if !token.operator => Err(not_allowed(format!(
                "token {} is not an operator's: only an operator may break a lock",
                token.name
            ))),
            _ => Ok(()),
        }
    }
}

fn not_allowed(detail: String) -> Problem {
    Problem::new(StatusCode::FORBIDDEN, "not-allowed", detail)
}

/// The caller of a request with `headers`, when the server has `tokens`.
///
/// # Errors
///
/// 401 for a missing, malformed or unknown token. The answer never repeats what was sent.
pub fn caller(tokens: Option<&Tokens>, headers: &HeaderMap) -> Result<Caller, Problem> {
    let Some(tokens) = tokens else {
        return Ok(Caller::anyone());
    };
    let unauthorized =
        |detail: &str| Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", detail);
    let mut given = headers.get_all(AUTHORIZATION).iter();
    let (Some(value), None) = (given.next(), given.next()) else {
        return Err(unauthorized(
            "this server needs one token: Authorization: Bearer <token>",
        ));
    };
    let secret = value
        .to_str()
        .ok()
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, secret)| secret.trim())
        .filter(|secret| !secret.is_empty());
    let Some(secret) = secret else {
        return Err(unauthorized(
            "the Authorization header must be: Bearer <token>",
        ));
    };
    tokens
        .find(secret)
        .map(|token| Caller(Some(token)))
        .ok_or_else(|| unauthorized("the token is not one this server knows"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::tokens::{AllResources, Resources, add};
    use hyper::header::HeaderValue;

    #[test]
    fn a_caller_is_known_by_its_bearer_token_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let name = crate::lock::TokenName::parse("ci").unwrap();
        let made = add(
            &path,
            name,
            Resources::All(AllResources::All),
            false,
            |_| Ok(()),
        )
        .unwrap();
        let tokens = Tokens::load(&path).unwrap();
        let secret = &made.secret;
        // (Authorization values, known)
        let cases: Vec<(Vec<String>, bool)> = vec![
            (vec![format!("Bearer {secret}")], true),
            (vec![format!("bearer {secret}")], true),
            (vec![format!("BEARER  {secret} ")], true),
            (vec![], false),
            (vec![secret.clone()], false),
            (vec![format!("Basic {secret}")], false),
            (vec!["Bearer ".into()], false),
            (vec![format!("Bearer {secret}x")], false),
            (
                vec![format!("Bearer {secret}"), format!("Bearer {secret}")],
                false,
            ),
        ];
        for (values, known) in cases {
            let mut headers = HeaderMap::new();
            for value in &values {
                headers.append(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            }
            match caller(Some(&tokens), &headers) {
                Ok(caller) => {
                    assert!(known, "{values:?} was let in");
                    assert_eq!(caller.name(), Some("ci"));
                }
                Err(problem) => {
                    assert!(!known, "{values:?} was refused");
                    assert_eq!(problem.status, StatusCode::UNAUTHORIZED);
                    let body = String::from_utf8(problem.body()).unwrap();
                    assert!(!body.contains(&secret[3..]), "never repeated: {body}");
                }
            }
        }
        // Without tokens, anyone, with any header or none.
        let anyone = caller(None, &HeaderMap::new()).unwrap();
        assert_eq!(anyone.name(), None);
        assert!(anyone.check_operator().is_ok());
    }
}
