//! The API's routes: what a method on a path asks for ([`Route::parse`], for the server) and
//! the method and path of a route ([`Route::method`], [`Route::path`], for a client). A lock
//! operation has two routes, one for a single resource named in the path (`/locks/{r}…`) and
//! one for a lock set whose members are in the body (`/sets…`); both are the same operation,
//! told apart by their [`Target`].

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use super::Bad;
use super::query;
use crate::lock::Resource;

/// Who a lock operation's route names: one resource, in its path, or a lock set, whose
/// members its body gives (`"resources":[…]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    One(Resource),
    Set,
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `POST /locks/{r}`, `POST /sets`.
    Acquire(Target),
    /// `GET /locks/{r}`.
    Status(Resource),
    /// `DELETE /locks/{r}`, `POST /sets/release`.
    Release(Target),
    /// `POST /locks/{r}/renew`, `POST /sets/renew`.
    Renew(Target),
    /// `POST /locks/{r}/break`.
    Break(Resource),
    /// A waiter gives up its place in the queue: `POST /locks/{r}/leave`, `POST /sets/leave`.
    Leave(Target),
    /// `GET /locks`.
    List,
    /// `GET /queues`: every live place in the queues, by resource.
    Queues,
    /// `GET /log`.
    Log,
    /// `GET /health`.
    Health,
    /// `GET /metrics`.
    Metrics,
    /// `GET /ui/` (also `/ui`): the dashboard's page (an empty name); `GET /ui/{file}`: one of
    /// its files, by name.
    Ui(String),
}

/// Why a method on a path is no route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unrouted {
    /// The path is not percent-encoded, or names no valid resource (400, 422).
    Bad(Bad),
    /// No route has this path (404), said in `detail`.
    NoSuchRoute(String),
    /// The path is a route's, but it does not take the method (405): `detail`, and the
    /// methods it takes for the `Allow` header.
    MethodNotAllowed { detail: String, allow: &'static str },
}

impl Route {
    /// The route of `method` on `path`. `HEAD` is routed as `GET` (RFC 9110: the same answer,
    /// whose body the HTTP layer leaves out).
    ///
    /// # Errors
    ///
    /// A path that is not percent-encoded or names an invalid resource, a path that is no
    /// route, and a route that does not take the method ([`Unrouted`]).
    pub fn parse(method: &str, path: &str) -> Result<Route, Unrouted> {
        query::path(path).map_err(Unrouted::Bad)?;
        let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
        let allow = match segments.as_slice() {
            ["locks" | "log" | "health" | "metrics" | "queues" | "ui"] | ["ui", _] => "GET, HEAD",
            ["locks", _] => "GET, HEAD, POST, DELETE",
            ["locks", _, "renew" | "break" | "leave"]
            | ["sets"]
            | ["sets", "renew" | "release" | "leave"] => "POST",
            _ => return Err(Unrouted::NoSuchRoute(format!("no route {path}"))),
        };
        let asked = if method == "HEAD" { "GET" } else { method };
        let one = |segment: &str| query::resource(segment).map_err(Unrouted::Bad);
        let target = |segment: &str| one(segment).map(Target::One);
        match (asked, segments.as_slice()) {
            ("GET", ["locks"]) => Ok(Route::List),
            ("POST", ["locks", r]) => Ok(Route::Acquire(target(r)?)),
            ("GET", ["locks", r]) => Ok(Route::Status(one(r)?)),
            ("DELETE", ["locks", r]) => Ok(Route::Release(target(r)?)),
            ("POST", ["locks", r, "renew"]) => Ok(Route::Renew(target(r)?)),
            ("POST", ["locks", r, "break"]) => Ok(Route::Break(one(r)?)),
            ("POST", ["locks", r, "leave"]) => Ok(Route::Leave(target(r)?)),
            ("POST", ["sets"]) => Ok(Route::Acquire(Target::Set)),
            ("POST", ["sets", "renew"]) => Ok(Route::Renew(Target::Set)),
            ("POST", ["sets", "release"]) => Ok(Route::Release(Target::Set)),
            ("POST", ["sets", "leave"]) => Ok(Route::Leave(Target::Set)),
            ("GET", ["log"]) => Ok(Route::Log),
            ("GET", ["queues"]) => Ok(Route::Queues),
            ("GET", ["ui"]) => Ok(Route::Ui(String::new())),
            ("GET", ["ui", file]) => Ok(Route::Ui((*file).to_owned())),
            ("GET", ["health"]) => Ok(Route::Health),
            ("GET", ["metrics"]) => Ok(Route::Metrics),
            _ => Err(Unrouted::MethodNotAllowed {
                detail: format!("{path} does not take {method}; it takes {allow}"),
                allow,
            }),
        }
    }

    /// One route of every kind, with a resource named `r` where it takes one: what the book's
    /// reference of the API is checked against (each [`Route::name`] is a heading there).
    ///
    /// # Panics
    ///
    /// Never: `r` is a valid resource name.
    pub fn every() -> Vec<Route> {
        use Target::{One, Set};
        let r = || Resource::parse("r").expect("a valid resource");
        let every = vec![
            Route::Acquire(One(r())),
            Route::Acquire(Set),
            Route::Status(r()),
            Route::Release(One(r())),
            Route::Release(Set),
            Route::Renew(One(r())),
            Route::Renew(Set),
            Route::Break(r()),
            Route::Leave(One(r())),
            Route::Leave(Set),
            Route::List,
            Route::Queues,
            Route::Log,
            Route::Health,
            Route::Metrics,
            Route::Ui(String::new()),
            Route::Ui("app.js".to_owned()),
        ];
        // A kind of route added to the enum fails to compile here until it is listed above.
        for route in &every {
            match route {
                Route::Acquire(_)
                | Route::Status(_)
                | Route::Release(_)
                | Route::Renew(_)
                | Route::Break(_)
                | Route::Leave(_)
                | Route::List
                | Route::Queues
                | Route::Log
                | Route::Health
                | Route::Metrics
                | Route::Ui(_) => {}
            }
        }
        every
    }

    /// The route's name in metrics and logs, without the resource.
    pub fn name(&self) -> &'static str {
        use Target::{One, Set};
        match self {
            Route::Acquire(One(_)) => "POST /locks/{r}",
            Route::Status(_) => "GET /locks/{r}",
            Route::Release(One(_)) => "DELETE /locks/{r}",
            Route::Renew(One(_)) => "POST /locks/{r}/renew",
            Route::Break(_) => "POST /locks/{r}/break",
            Route::Leave(One(_)) => "POST /locks/{r}/leave",
            Route::Acquire(Set) => "POST /sets",
            Route::Renew(Set) => "POST /sets/renew",
            Route::Release(Set) => "POST /sets/release",
            Route::Leave(Set) => "POST /sets/leave",
            Route::List => "GET /locks",
            Route::Queues => "GET /queues",
            Route::Log => "GET /log",
            Route::Health => "GET /health",
            Route::Metrics => "GET /metrics",
            Route::Ui(file) if file.is_empty() => "GET /ui/",
            Route::Ui(_) => "GET /ui/{file}",
        }
    }

    /// Whether the request carries a JSON body.
    pub fn takes_body(&self) -> bool {
        matches!(
            self,
            Route::Acquire(_)
                | Route::Release(_)
                | Route::Renew(_)
                | Route::Break(_)
                | Route::Leave(_)
        )
    }

    /// The method a client sends.
    pub fn method(&self) -> &'static str {
        match self {
            Route::Release(Target::One(_)) => "DELETE",
            Route::Status(_)
            | Route::List
            | Route::Queues
            | Route::Log
            | Route::Health
            | Route::Metrics
            | Route::Ui(_) => "GET",
            Route::Acquire(_)
            | Route::Release(Target::Set)
            | Route::Renew(_)
            | Route::Break(_)
            | Route::Leave(_) => "POST",
        }
    }

    /// The path a client sends to, its resource percent-encoded (without a query).
    pub fn path(&self) -> String {
        match self {
            Route::Acquire(Target::One(r)) | Route::Status(r) | Route::Release(Target::One(r)) => {
                lock_path(r, "")
            }
            Route::Renew(Target::One(r)) => lock_path(r, "/renew"),
            Route::Break(r) => lock_path(r, "/break"),
            Route::Leave(Target::One(r)) => lock_path(r, "/leave"),
            Route::Acquire(Target::Set) => "/sets".to_owned(),
            Route::Renew(Target::Set) => "/sets/renew".to_owned(),
            Route::Release(Target::Set) => "/sets/release".to_owned(),
            Route::Leave(Target::Set) => "/sets/leave".to_owned(),
            Route::List => "/locks".to_owned(),
            Route::Queues => "/queues".to_owned(),
            Route::Log => "/log".to_owned(),
            Route::Health => "/health".to_owned(),
            Route::Metrics => "/metrics".to_owned(),
            Route::Ui(file) => format!("/ui/{file}"),
        }
    }
}

/// `/locks/{resource}{tail}`, the resource one percent-encoded segment.
fn lock_path(resource: &Resource, tail: &str) -> String {
    format!("/locks/{}{tail}", encoded(resource.as_str()))
}

/// `text` percent-encoded for a path segment or a query value: every byte but ASCII letters
/// and digits escaped.
pub(super) fn encoded(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_named_once_and_parses_back_from_its_name() {
        let every = Route::every();
        let mut names: Vec<&str> = every.iter().map(Route::name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            every.len(),
            "two routes share a name: {names:?}"
        );
        for route in every {
            let (method, path) = route.name().split_once(' ').expect("METHOD /path");
            let path = path.replace("{r}", "r").replace("{file}", "app.js");
            assert_eq!(
                Route::parse(method, &path),
                Ok(route.clone()),
                "{}",
                route.name()
            );
        }
    }

    fn status(unrouted: &Unrouted) -> u16 {
        match unrouted {
            Unrouted::Bad(Bad::Invalid(_)) => 422,
            Unrouted::Bad(_) => 400,
            Unrouted::NoSuchRoute(_) => 404,
            Unrouted::MethodNotAllowed { .. } => 405,
        }
    }

    #[test]
    fn every_route_of_the_api_and_the_wrong_methods_and_paths() {
        let r = |name: &str| Resource::parse(name).unwrap();
        let one = |name: &str| Target::One(r(name));
        let cases: Vec<(&str, &str, Result<Route, u16>)> = vec![
            ("POST", "/locks/a", Ok(Route::Acquire(one("a")))),
            ("GET", "/locks/a", Ok(Route::Status(r("a")))),
            ("DELETE", "/locks/a", Ok(Route::Release(one("a")))),
            ("POST", "/locks/a/renew", Ok(Route::Renew(one("a")))),
            ("POST", "/locks/a/break", Ok(Route::Break(r("a")))),
            ("POST", "/locks/a/leave", Ok(Route::Leave(one("a")))),
            ("DELETE", "/locks/a/leave", Err(405)),
            (
                "POST",
                "/locks/deploy%2Fprod",
                Ok(Route::Acquire(one("deploy/prod"))),
            ),
            ("GET", "/locks", Ok(Route::List)),
            ("GET", "/log", Ok(Route::Log)),
            ("GET", "/health", Ok(Route::Health)),
            ("GET", "/metrics", Ok(Route::Metrics)),
            ("GET", "/queues", Ok(Route::Queues)),
            ("HEAD", "/queues", Ok(Route::Queues)),
            ("POST", "/queues", Err(405)),
            ("GET", "/ui/", Ok(Route::Ui(String::new()))),
            ("GET", "/ui", Ok(Route::Ui(String::new()))),
            ("GET", "/ui/app.js", Ok(Route::Ui("app.js".into()))),
            ("HEAD", "/ui/style.css", Ok(Route::Ui("style.css".into()))),
            ("POST", "/ui/", Err(405)),
            ("DELETE", "/ui/app.js", Err(405)),
            ("GET", "/ui/a/b", Err(404)),
            ("POST", "/sets", Ok(Route::Acquire(Target::Set))),
            ("POST", "/sets/renew", Ok(Route::Renew(Target::Set))),
            ("POST", "/sets/release", Ok(Route::Release(Target::Set))),
            ("POST", "/sets/leave", Ok(Route::Leave(Target::Set))),
            ("GET", "/sets/leave", Err(405)),
            ("GET", "/sets", Err(405)),
            ("DELETE", "/sets", Err(405)),
            ("GET", "/sets/renew", Err(405)),
            ("PUT", "/sets/release", Err(405)),
            ("POST", "/sets/a", Err(404)),
            ("POST", "/sets/renew/a", Err(404)),
            ("PUT", "/locks/a", Err(405)),
            ("GET", "/locks/a/renew", Err(405)),
            ("POST", "/locks", Err(405)),
            ("DELETE", "/health", Err(405)),
            ("GET", "/", Err(404)),
            ("GET", "/locks/a/b", Err(404)),
            ("GET", "/lockss", Err(404)),
            ("GET", "/locks/", Err(422)),
            ("GET", "/locks/%ZZ", Err(400)),
            ("GET", "/nope%ZZ", Err(400)),
            ("PUT", "/locks/a%", Err(400)),
            ("HEAD", "/health", Ok(Route::Health)),
            ("HEAD", "/metrics", Ok(Route::Metrics)),
            ("HEAD", "/locks", Ok(Route::List)),
            ("HEAD", "/log", Ok(Route::Log)),
            ("HEAD", "/locks/a", Ok(Route::Status(r("a")))),
            ("HEAD", "/locks/a/renew", Err(405)),
            ("HEAD", "/sets", Err(405)),
        ];
        for (method, path, expected) in cases {
            let got = Route::parse(method, path).map_err(|unrouted| status(&unrouted));
            assert_eq!(got, expected, "{method} {path}");
        }
        // (method, path, the 405's Allow)
        let allows = [
            ("PUT", "/locks/a", "GET, HEAD, POST, DELETE"),
            ("POST", "/locks", "GET, HEAD"),
            ("DELETE", "/health", "GET, HEAD"),
            ("POST", "/metrics", "GET, HEAD"),
            ("PUT", "/log", "GET, HEAD"),
            ("GET", "/locks/a/renew", "POST"),
            ("HEAD", "/locks/a/break", "POST"),
            ("GET", "/sets", "POST"),
            ("DELETE", "/sets/renew", "POST"),
            ("OPTIONS", "/sets/release", "POST"),
        ];
        for (method, path, want) in allows {
            match Route::parse(method, path) {
                Err(Unrouted::MethodNotAllowed { allow, detail }) => {
                    assert_eq!(allow, want, "{method} {path}");
                    assert_eq!(
                        detail,
                        format!("{path} does not take {method}; it takes {want}")
                    );
                }
                other => panic!("{method} {path}: {other:?}"),
            }
        }
        let long = format!("/locks/{}", "a".repeat(256));
        assert_eq!(
            Route::parse("POST", &long).map_err(|u| status(&u)),
            Err(422)
        );
    }

    #[test]
    fn a_client_sends_each_route_to_the_path_and_with_the_method_the_server_reads() {
        let r = |name: &str| Resource::parse(name).unwrap();
        let one = |name: &str| Target::One(r(name));
        let routes = [
            Route::Acquire(one("deploy/prod")),
            Route::Status(r("a b")),
            Route::Release(one("x'; DROP TABLE locks;--")),
            Route::Renew(one("zürich")),
            Route::Break(r("%ZZ")),
            Route::Leave(one("a")),
            Route::Acquire(Target::Set),
            Route::Renew(Target::Set),
            Route::Release(Target::Set),
            Route::Leave(Target::Set),
            Route::List,
            Route::Queues,
            Route::Log,
            Route::Health,
            Route::Metrics,
            Route::Ui(String::new()),
            Route::Ui("app.js".into()),
        ];
        for route in routes {
            let (method, path) = (route.method(), route.path());
            assert_eq!(
                Route::parse(method, &path),
                Ok(route.clone()),
                "{method} {path}"
            );
        }
        assert_eq!(
            Route::Renew(one("deploy/prod")).path(),
            "/locks/deploy%2Fprod/renew"
        );
    }
}
