//! The queries of the API's reads: `GET /locks?prefix=`, `GET /queues?prefix=` and
//! `GET /log?resource=&prefix=&since=&limit=`, each as a client sends it (`…_path`) and as the
//! server reads it back (`read_…`), strictly: a parameter given twice or not one the route
//! takes is refused naming it.

use super::Bad;
use super::query::Params;
use super::routes::{Route, encoded};
use crate::lock::{LogQuery, Resource};

/// `GET /locks?prefix=…`: the path of `list`.
pub fn list_path(prefix: &str) -> String {
    format!("{}?prefix={}", Route::List.path(), encoded(prefix))
}

/// The prefix `GET /locks` asks for (`?prefix=`, none: every lock).
///
/// # Errors
///
/// A query that is not percent-encoded, or gives a parameter twice or one `list` does not
/// take.
pub fn read_list(query: Option<&str>) -> Result<String, Bad> {
    let mut params = Params::parse(query)?;
    let prefix = params.take("prefix").unwrap_or_default();
    params.finish()?;
    Ok(prefix)
}

/// `GET /log?resource=…&prefix=…&since=…ms&limit=…`: the path of `log`.
pub fn log_path(query: &LogQuery) -> String {
    let mut params = Vec::new();
    if let Some(resource) = &query.resource {
        params.push(format!("resource={}", encoded(resource.as_str())));
    }
    if let Some(prefix) = &query.prefix {
        params.push(format!("prefix={}", encoded(prefix)));
    }
    if let Some(since) = query.since {
        params.push(format!("since={}ms", since.as_millis()));
    }
    if let Some(limit) = query.limit {
        params.push(format!("limit={limit}"));
    }
    let path = Route::Log.path();
    if params.is_empty() {
        path
    } else {
        format!("{path}?{}", params.join("&"))
    }
}

/// The history `GET /log` asks for: `resource`, `prefix` (the resources that start with it),
/// `since` (a duration as `--since` takes it) and `limit`.
///
/// # Errors
///
/// A query that is not percent-encoded, gives a parameter twice or one `log` does not take, or
/// a value that breaks its rule.
pub fn read_log(query: Option<&str>) -> Result<LogQuery, Bad> {
    let mut params = Params::parse(query)?;
    let resource = params
        .take("resource")
        .map(|r| Resource::parse(&r).map_err(Bad::Invalid))
        .transpose()?;
    let prefix = params.take("prefix");
    let since = params.duration("since")?;
    let limit = params.count("limit")?;
    params.finish()?;
    Ok(LogQuery {
        resource,
        prefix,
        since,
        limit,
    })
}

/// `GET /queues?prefix=…`: the path of the queues' read.
pub fn queues_path(prefix: &str) -> String {
    format!("{}?prefix={}", Route::Queues.path(), encoded(prefix))
}

/// The prefix `GET /queues` asks for (`?prefix=`, none: every queue).
///
/// # Errors
///
/// A query that is not percent-encoded, or gives a parameter twice or one the route does not
/// take.
pub fn read_queues(query: Option<&str>) -> Result<String, Bad> {
    read_list(query)
}
