//! `handoff`: one holder and one waiter on one resource. The waiter long-polls (distlock:
//! `wait_seconds`; etcd: its lock call blocks); once the server shows it waiting, and a moment
//! more (`--settle-ms`) so that it is asleep there, the holder lets go. Measured: from the
//! holder's release being sent to the waiter's grant arriving, over many rounds.
//!
//! The moment is 200 ms unless told: etcd's lock waits on a watch that starts at a past
//! revision, which etcd 3.4 moves to its live watchers only on a tick of 100 ms, so a waiter
//! younger than that is answered on the tick (about 73 ms at a settle of 20 ms, 2 ms at 150 ms,
//! measured here). The row measures a handoff to a waiter already asleep, on both servers.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::client::{Client, Target};
use crate::measure::{Sample, Watched, ms, percentiles};

/// How long the waiter waits in line, in seconds: far longer than a round.
const WAIT_SECONDS: u64 = 60;

/// How long the holder looks for the waiter in the queue before it gives up.
const SHOWS_WAITING: Duration = Duration::from_secs(10);

/// The waiter's side: told to go, it acquires (long-polling) and says when its grant
/// arrived; then it lets go, so that the holder takes the lock again at once.
async fn waiter(
    mut client: Client,
    mut told: mpsc::Receiver<()>,
    granted: mpsc::Sender<Result<Instant, String>>,
) {
    // A first request, so that the waiter's connection is open before the first round.
    let _ = client.waiting().await;
    while told.recv().await.is_some() {
        let outcome = match client.acquire(Some(WAIT_SECONDS)).await {
            Ok(held) => {
                let at = Instant::now();
                client.release(held).await.map(|()| at)
            }
            Err(err) => Err(err),
        };
        if granted.send(outcome).await.is_err() {
            return;
        }
    }
}

/// One round: the holder takes the lock, the waiter queues for it, the holder lets go.
async fn round(
    holder: &mut Client,
    go: &mpsc::Sender<()>,
    grants: &mut mpsc::Receiver<Result<Instant, String>>,
    settle: Duration,
) -> Result<Duration, String> {
    let held = holder.acquire(None).await?;
    go.send(())
        .await
        .map_err(|_| "the waiter is gone".to_owned())?;
    let asked = Instant::now();
    while holder.waiting().await? == 0 {
        if asked.elapsed() > SHOWS_WAITING {
            return Err("the waiter never showed as waiting".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(settle).await;
    let sent = Instant::now();
    holder.release(held).await?;
    let arrived = grants
        .recv()
        .await
        .ok_or_else(|| "the waiter is gone".to_owned())??;
    Ok(arrived.saturating_duration_since(sent))
}

/// # Errors
///
/// A round that failed, named.
pub async fn handoff(
    target: &Target,
    (prefix, ttl): (&str, u64),
    rounds: usize,
    settle: Duration,
    watched: &Watched,
) -> Result<Value, String> {
    let resource = format!("{prefix}-handoff");
    let mut holder = Client::open(target, &resource, &format!("{prefix}-holder"), ttl).await?;
    let waiting = Client::open(target, &resource, &format!("{prefix}-waiter"), ttl).await?;
    let (go, told) = mpsc::channel(1);
    let (granted, mut grants) = mpsc::channel(1);
    let waiter = tokio::spawn(waiter(waiting, told, granted));
    // Two rounds not counted: the first connections and statements.
    for _ in 0..2 {
        round(&mut holder, &go, &mut grants, settle).await?;
    }
    let first = Sample::take(watched);
    let started = Instant::now();
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        samples.push(round(&mut holder, &go, &mut grants, settle).await?);
    }
    let wall = started.elapsed();
    let last = Sample::take(watched);
    drop(go);
    let _ = waiter.await;
    let mut report = json!({
        "mode": "handoff",
        "target": target.name(),
        "url": target.endpoint().url,
        "rounds": samples.len(),
        "settle_ms": ms(settle),
    });
    first.report(&last, watched, wall, samples.len(), &mut report);
    percentiles(&mut report, "", &mut samples);
    Ok(report)
}
