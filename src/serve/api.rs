//! One request in, one answer out: the route, the checked input, the operation on the store
//! (on a blocking thread, never on the async ones), and the status and body. The bodies are the
//! command line's answers, from the same types; every other answer is a [`Problem`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE,
    X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Request, Response, StatusCode};

use super::access::{self, Caller};
use super::operations;
use super::problem::Problem;
use super::reply::{Reply, unrouted};
use super::shared::Shared;
use crate::protocol::{API_HEADER, GRANT_HEADER, MAX_BODY, MAX_HEAD, Route, Target, WAITED_HEADER};
use crate::store::{Locks, op};

/// How long a client may take to send a request's body, once its headers are in: a body that
/// stalls is answered 408 and its connection closed, so that it holds no connection's place.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Answers one request; logs it and counts it.
pub async fn handle(state: Arc<Shared>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let head = oversized_head(&request);
    // Every request but /health and the dashboard's files (which hold no data) shows its token
    // first, before anything else is said of it.
    let caller = if path == "/health" || super::ui::is_file(&path) {
        Ok(Caller::anyone())
    } else {
        access::caller(state.tokens().as_deref(), request.headers())
    };
    let routed = Route::parse(method.as_str(), &path).map_err(unrouted);
    let query = request.uri().query().map(str::to_owned);
    let json = is_json(&request);
    let validator = super::ui::validator(request.headers());
    // The body is read whatever the answer (within its time), so that the connection can
    // carry the next request; one that is too large or too slow is not, and the connection is
    // closed after the answer. A caller without a token the server knows is answered at once,
    // before its body, so that it holds no connection waiting for one; its connection is
    // closed after the answer.
    let body = match &caller {
        Ok(_) => read_body(request).await,
        Err(_) => Ok(Vec::new()),
    };
    let close = body.is_err() || caller.is_err();
    let who = caller
        .as_ref()
        .ok()
        .and_then(Caller::name)
        .map(|name| format!(" token {name}"))
        .unwrap_or_default();
    let (name, reply) = match (head, caller, routed, body) {
        (Some(problem), ..) | (None, Err(problem), ..) => ("other", problem.into()),
        (None, Ok(_), Err(problem), _) => ("other", problem.into()),
        (None, Ok(_), Ok(route), Err(problem)) => (route.name(), problem.into()),
        (None, Ok(caller), Ok(route), Ok(body)) => {
            let name = route.name();
            let reply =
                match admitted(&caller, &route).and_then(|()| checked_body(&route, body, json)) {
                    Ok(body) => answer(&state, route, body, query, caller, validator).await,
                    Err(problem) => problem.into(),
                };
            (name, reply)
        }
    };
    let took = started.elapsed();
    state.metrics.record(name, reply.status.as_u16(), took);
    crate::output::warn(format_args!(
        "{method} {path} {} {:.1} ms{who}",
        reply.status.as_u16(),
        took.as_secs_f64() * 1000.0
    ));
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() = reply.status;
    response
        .headers_mut()
        .insert(API_HEADER, HeaderValue::from_static("1"));
    response
        .headers_mut()
        .insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response.headers_mut().extend(reply.headers.into_vec());
    if reply.status != StatusCode::NO_CONTENT {
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(reply.kind));
    }
    if close {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    if let Some((how, waited)) = reply.grant {
        let headers = response.headers_mut();
        if let Ok(how) = HeaderValue::from_str(&how) {
            headers.insert(GRANT_HEADER, how);
        }
        let millis = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
        headers.insert(WAITED_HEADER, HeaderValue::from(millis));
    }
    if let Some(allow) = reply.allow {
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static(allow));
    }
    if reply.status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// Refuses a request outside what the caller's token allows: a resource beyond its prefixes,
/// or a `break` by a token that is not an operator's. `list` and `log` show only what the
/// token may see (see [`operations`]).
fn admitted(caller: &Caller, route: &Route) -> Result<(), Problem> {
    match route {
        Route::Acquire(Target::One(resource))
        | Route::Release(Target::One(resource))
        | Route::Renew(Target::One(resource))
        | Route::Leave(Target::One(resource)) => caller.check(resource),
        Route::Status(resource) => caller.check_see(resource),
        Route::Break(_) => caller.check_operator(),
        // A set's members are in its body: checked once it is read (see [`operations`]).
        Route::Acquire(Target::Set)
        | Route::Renew(Target::Set)
        | Route::Release(Target::Set)
        | Route::Leave(Target::Set) => Ok(()),
        Route::List
        | Route::Queues
        | Route::Log
        | Route::Health
        | Route::Metrics
        | Route::Ui(_) => Ok(()),
    }
}

/// A request line longer than [`MAX_HEAD`] (414), or a request line and headers that are
/// (431). The HTTP layer takes up to four times as much before it refuses a request itself.
fn oversized_head(request: &Request<Incoming>) -> Option<Problem> {
    let line = request.method().as_str().len() + request.uri().to_string().len() + 11;
    if line > MAX_HEAD {
        return Some(Problem::new(
            StatusCode::URI_TOO_LONG,
            "too-large",
            format!("a request line may hold at most {MAX_HEAD} bytes"),
        ));
    }
    let headers: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    (line + headers > MAX_HEAD).then(|| {
        Problem::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "too-large",
            format!("a request line and headers may hold at most {MAX_HEAD} bytes"),
        )
    })
}

/// Whether the request says its body is JSON.
fn is_json(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|kind| kind.trim().eq_ignore_ascii_case("application/json"))
}

async fn answer(
    state: &Arc<Shared>,
    route: Route,
    body: Vec<u8>,
    query: Option<String>,
    caller: Caller,
    validator: Option<String>,
) -> Reply {
    let work = super::work::Work {
        state,
        caller: &caller,
        body: &body,
        query: query.as_deref(),
    };
    match route {
        Route::Health => health(state).await,
        Route::Metrics => metrics(state).await,
        Route::Acquire(target) => operations::acquire(&work, target).await,
        Route::Status(resource) => operations::status(&work, resource).await,
        Route::Release(target) => operations::release(&work, target).await,
        Route::Renew(target) => operations::renew(&work, target).await,
        Route::Break(resource) => operations::break_lock(&work, resource).await,
        Route::Leave(target) => operations::leave(&work, target).await,
        Route::List => operations::list(&work).await,
        Route::Queues => super::queues::read(&work).await,
        Route::Ui(file) => super::ui::file(&file, validator.as_deref()),
        Route::Log => operations::log(&work).await,
    }
}

/// `GET /health`: 200 when the store answers within [`super::health::ANSWER_WITHIN`], else
/// 503 saying only that (the cause goes to the log and `/metrics`).
async fn health(state: &Arc<Shared>) -> Reply {
    if super::shared::store_answers(state).await {
        Reply::text("ok\n".into(), "text/plain; charset=utf-8")
    } else {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store-unavailable",
            "store unavailable",
        )
        .into()
    }
}

/// `GET /metrics`: the counts, the store's health, and the live tenures when the store answers.
async fn metrics(state: &Arc<Shared>) -> Reply {
    let up = super::shared::store_answers(state).await;
    let tenures = if up {
        let list = op::List {
            prefix: String::new(),
        };
        (state.readers)
            .read(move |store| Ok(store.perform(list)?.len()))
            .await
            .ok()
    } else {
        None
    };
    let waiting = state.waiters.len();
    let text = state.metrics.render(
        tenures,
        waiting,
        state.writer.written(),
        &state.health.finding(),
    );
    Reply::text(text, "text/plain; version=0.0.4; charset=utf-8")
}

/// The body, at most [`MAX_BODY`] bytes.
async fn read_body(request: Request<Incoming>) -> Result<Vec<u8>, Problem> {
    let too_large = || {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too-large",
            format!("a request body may hold at most {MAX_BODY} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY as u64) {
        return Err(too_large());
    }
    let collected = tokio::time::timeout(
        BODY_TIMEOUT,
        Limited::new(request.into_body(), MAX_BODY).collect(),
    )
    .await
    .map_err(|_| {
        Problem::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!(
                "a request body must arrive within {} s",
                BODY_TIMEOUT.as_secs()
            ),
        )
    })?;
    Ok(collected.map_err(|_| too_large())?.to_bytes().to_vec())
}

/// The body of a request that takes one: JSON; nothing for one that takes none.
fn checked_body(route: &Route, body: Vec<u8>, json: bool) -> Result<Vec<u8>, Problem> {
    if body.is_empty() {
        return Ok(body);
    }
    if !route.takes_body() {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
            "this request takes no body",
        ));
    }
    if !json {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "the body must be application/json",
        ));
    }
    Ok(body)
}
