//! `idle`: K keep-alive connections that each made one request (`GET /health`), held open;
//! with `--pid` the server's resident memory, threads and open descriptors are read from
//! `/proc` before and after. (`distlock serve` closes a connection idle for 10 s: the reading
//! is taken at once, and `--hold` should stay under that to keep them all.)

use std::time::{Duration, Instant};

use distlock::protocol::Route;
use hyper::Method;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::client::Target;
use crate::http::Connection;
use crate::measure::{Facts, mib, ms};

/// How many connections are being opened at once.
const OPENING: usize = 64;

/// # Errors
///
/// A connection that could not be opened or whose `/health` did not answer 200, or a server
/// whose `/proc` cannot be read.
pub async fn idle(
    target: &Target,
    connections: usize,
    pid: Option<u32>,
    hold: Duration,
) -> Result<Value, String> {
    let path = match target {
        Target::Distlock(_) => Route::Health.path(),
        Target::Etcd(_) => "/health".to_owned(),
    };
    let before = pid.map(Facts::of).transpose()?;
    let started = Instant::now();
    let opening = std::sync::Arc::new(Semaphore::new(OPENING));
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (endpoint, path, opening) =
                (target.endpoint().clone(), path.clone(), opening.clone());
            tokio::spawn(async move {
                let _turn = opening.acquire().await;
                let mut connection = Connection::open(&endpoint).await?;
                let answer = connection.send(Method::GET, &path, None).await?;
                if answer.status == 200 {
                    Ok(connection)
                } else {
                    Err(format!("GET {path}: {}", answer.describe()))
                }
            })
        })
        .collect();
    let mut open = Vec::with_capacity(connections);
    for task in tasks {
        open.push(task.await.map_err(|err| err.to_string())??);
    }
    let opened = started.elapsed();
    // A moment for the server to settle what each connection left (buffers freed or kept).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = pid.map(Facts::of).transpose()?;
    let mut report = json!({
        "mode": "idle",
        "target": target.name(),
        "url": target.endpoint().url,
        "connections": open.len(),
        "open_ms": ms(opened),
    });
    if let (Some(before), Some(after)) = (before, after) {
        report["rss_before_kib"] = json!(before.rss_kib);
        report["rss_kib"] = json!(after.rss_kib);
        report["rss_mib"] = json!(mib(after.rss_kib));
        report["peak_rss_kib"] = json!(after.peak_rss_kib);
        report["server_threads_before"] = json!(before.threads);
        report["server_threads"] = json!(after.threads);
        report["fds_before"] = json!(before.fds);
        report["fds"] = json!(after.fds);
    }
    eprintln!("serve_load: {} connections open", open.len());
    tokio::time::sleep(hold).await;
    drop(open);
    Ok(report)
}
