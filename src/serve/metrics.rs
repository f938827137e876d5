//! `GET /metrics`: what the server has answered, in Prometheus' text format — requests by route
//! and status, a latency histogram, and the requests waiting now; the store's kind (SQLite or
//! PostgreSQL, never its path, host or credentials) and health (whether it answered the last
//! probe, and the last error it met, which `/health` does not say); the live tenures are
//! counted from the store at each scrape that finds it answering.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use super::health::Finding;
use crate::store::Location;

/// The upper bounds of the latency histogram's buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0,
];

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Counts>,
    /// The kind of store served: `sqlite`, `postgresql` or `server`.
    store: &'static str,
}

#[derive(Default)]
struct Counts {
    /// (route, status) → requests.
    requests: BTreeMap<(&'static str, u16), u64>,
    /// Requests per bucket of [`BUCKETS`] (not cumulative), and past the last.
    buckets: [u64; BUCKETS.len() + 1],
    seconds: f64,
    count: u64,
}

impl Metrics {
    /// The metrics of a server of the store at `location`, which they name by its kind only.
    pub fn of_store(location: &Location) -> Metrics {
        Metrics {
            store: match location {
                Location::Sqlite(..) => "sqlite",
                Location::Postgres(_) => "postgresql",
                Location::Server(_) => "server",
            },
            ..Metrics::default()
        }
    }

    /// Counts one answered request.
    pub fn record(&self, route: &'static str, status: u16, took: Duration) {
        let Ok(mut counts) = self.inner.lock() else {
            return;
        };
        *counts.requests.entry((route, status)).or_default() += 1;
        let secs = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|bound| secs <= *bound)
            .unwrap_or(BUCKETS.len());
        counts.buckets[bucket] += 1;
        counts.seconds += secs;
        counts.count += 1;
    }

    /// The text format, with the gauges read at this scrape and what the store's probes found.
    /// The metrics' text; `written`: the writer's batches and the operations they carried.
    pub fn render(
        &self,
        tenures: Option<usize>,
        waiting: usize,
        written: (u64, u64),
        store: &Finding,
    ) -> String {
        let mut text = String::new();
        let Ok(counts) = self.inner.lock() else {
            return text;
        };
        text.push_str("# HELP distlock_requests_total Requests answered, by route and status.\n");
        text.push_str("# TYPE distlock_requests_total counter\n");
        for ((route, status), n) in &counts.requests {
            let _ = writeln!(
                text,
                "distlock_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        text.push_str("# HELP distlock_request_duration_seconds Time to answer a request.\n");
        text.push_str("# TYPE distlock_request_duration_seconds histogram\n");
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(&counts.buckets) {
            cumulative += n;
            let _ = writeln!(
                text,
                "distlock_request_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            text,
            "distlock_request_duration_seconds_bucket{{le=\"+Inf\"}} {}",
            counts.count
        );
        let _ = writeln!(
            text,
            "distlock_request_duration_seconds_sum {}\ndistlock_request_duration_seconds_count {}",
            counts.seconds, counts.count
        );
        text.push_str("# HELP distlock_waiting_requests Requests waiting in a queue now.\n");
        text.push_str("# TYPE distlock_waiting_requests gauge\n");
        let _ = writeln!(text, "distlock_waiting_requests {waiting}");
        let (batches, operations) = written;
        text.push_str(
            "# HELP distlock_write_batches_total Transactions the store's writer committed.\n",
        );
        text.push_str("# TYPE distlock_write_batches_total counter\n");
        let _ = writeln!(text, "distlock_write_batches_total {batches}");
        text.push_str(
            "# HELP distlock_write_operations_total Lock operations those transactions carried.\n",
        );
        text.push_str("# TYPE distlock_write_operations_total counter\n");
        let _ = writeln!(text, "distlock_write_operations_total {operations}");
        text.push_str(
            "# HELP distlock_store_up Whether the store answered the server's last probe.\n",
        );
        text.push_str("# TYPE distlock_store_up gauge\n");
        let _ = writeln!(text, "distlock_store_up {}", u8::from(store.up));
        if !self.store.is_empty() {
            text.push_str(
                "# HELP distlock_store_info The kind of store served: sqlite or postgresql.\n",
            );
            text.push_str("# TYPE distlock_store_info gauge\n");
            let _ = writeln!(text, "distlock_store_info{{kind=\"{}\"}} 1", self.store);
        }
        if let Some((error, at)) = &store.last_error {
            text.push_str(
                "# HELP distlock_store_last_error When the store last failed a probe (Unix \
                 seconds), and why.\n",
            );
            text.push_str("# TYPE distlock_store_last_error gauge\n");
            let _ = writeln!(
                text,
                "distlock_store_last_error{{error=\"{}\"}} {at}",
                label(error)
            );
        }
        if let Some(tenures) = tenures {
            text.push_str("# HELP distlock_live_tenures Live tenures in the store.\n");
            text.push_str("# TYPE distlock_live_tenures gauge\n");
            let _ = writeln!(text, "distlock_live_tenures {tenures}");
        }
        text
    }
}

/// `text` as a label's value: backslash, double quote and newline escaped.
fn label(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_route_and_status_and_timed_in_cumulative_buckets() {
        let location = Location::Postgres("postgres://u:secret@db.internal/locks".into());
        let metrics = Metrics::of_store(&location);
        metrics.record("POST /locks/{r}", 200, Duration::from_micros(300));
        metrics.record("POST /locks/{r}", 200, Duration::from_millis(3));
        metrics.record("GET /locks/{r}", 404, Duration::from_secs(60));
        let up = Finding {
            up: true,
            last_error: None,
        };
        let text = metrics.render(Some(2), 1, (3, 5), &up);
        for line in [
            "distlock_requests_total{route=\"GET /locks/{r}\",status=\"404\"} 1",
            "distlock_requests_total{route=\"POST /locks/{r}\",status=\"200\"} 2",
            "distlock_request_duration_seconds_bucket{le=\"0.0005\"} 1",
            "distlock_request_duration_seconds_bucket{le=\"0.005\"} 2",
            "distlock_request_duration_seconds_bucket{le=\"30\"} 2",
            "distlock_request_duration_seconds_bucket{le=\"+Inf\"} 3",
            "distlock_request_duration_seconds_count 3",
            "distlock_waiting_requests 1",
            "distlock_write_batches_total 3",
            "distlock_write_operations_total 5",
            "distlock_live_tenures 2",
            "distlock_store_up 1",
            "distlock_store_info{kind=\"postgresql\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        assert!(!text.contains("distlock_store_last_error"));
        assert!(
            !text.contains("secret") && !text.contains("db.internal"),
            "{text}"
        );
        let down = Finding {
            up: false,
            last_error: Some(("cannot reach \"db\" \\ here\n".into(), 1_700_000_000)),
        };
        let text = metrics.render(None, 0, (0, 0), &down);
        assert!(!text.contains("live_tenures"));
        for line in [
            "distlock_store_up 0",
            r#"distlock_store_last_error{error="cannot reach \"db\" \\ here\n"} 1700000000"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
    }
}
