//! A client of etcd's lock API on one resource, through etcd's HTTP/JSON gateway (`/v3/…`, as
//! etcd 3.4 serves it), driven by the same loop as distlock's: each client is granted one lease
//! at the start, as a real client is, and locks and unlocks on it. The gateway takes and gives
//! keys in base64, and 64-bit integers as JSON strings.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hyper::Method;
use hyper::body::Bytes;
use serde::{Deserialize, Deserializer, Serialize};

use crate::http::{Connection, Endpoint};

/// `POST /v3/lease/grant`.
#[derive(Serialize)]
struct LeaseGrant {
    #[serde(rename = "TTL")]
    ttl: u64,
}

#[derive(Deserialize)]
struct LeaseGranted {
    #[serde(rename = "ID", deserialize_with = "int64")]
    id: i64,
}

/// `POST /v3/lock/lock`: waits until the lock named `name` is the lease's.
#[derive(Serialize)]
struct Lock<'a> {
    name: &'a str,
    /// The lease's ID, as the gateway writes int64s: a string.
    lease: String,
}

/// Its answer: the lock's own key (`name/lease`), which unlocks it.
#[derive(Deserialize)]
struct Locked {
    key: String,
}

/// `POST /v3/lock/unlock`.
#[derive(Serialize)]
struct Unlock<'a> {
    key: &'a str,
}

/// `POST /v3/kv/range` counting the keys in [`key`, `range_end`).
#[derive(Serialize)]
struct CountKeys<'a> {
    key: &'a str,
    range_end: &'a str,
    count_only: bool,
}

#[derive(Deserialize)]
struct Counted {
    /// Left out when there are none.
    #[serde(default, deserialize_with = "int64")]
    count: i64,
}

/// A 64-bit integer as the gateway writes it (a string), or as a plain number.
fn int64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int64 {
        Text(String),
        Number(i64),
    }
    match Int64::deserialize(deserializer)? {
        Int64::Number(n) => Ok(n),
        Int64::Text(text) => text.parse().map_err(serde::de::Error::custom),
    }
}

/// One client of one lock name, with a lease of its own and a keep-alive connection.
pub struct Etcd {
    connection: Connection,
    lock: Bytes,
    /// The keys of the lock's waiters and holder are `name/lease`: the range [`name/`, `name0`).
    count: Bytes,
}

/// The key of a lock that is held, which unlocks it.
pub struct Key(Bytes);

impl Etcd {
    /// A client of the lock named `resource`, on a lease of `ttl` seconds granted now.
    ///
    /// # Errors
    ///
    /// No connection, or no lease.
    pub async fn open(endpoint: &Endpoint, resource: &str, ttl: u64) -> Result<Etcd, String> {
        let mut connection = Connection::open(endpoint).await?;
        let granted: LeaseGranted = call(&mut connection, "/v3/lease/grant", &LeaseGrant { ttl })
            .await
            .map_err(|err| format!("etcd granted no lease: {err}"))?;
        let lock = json(&Lock {
            name: &STANDARD.encode(resource),
            lease: granted.id.to_string(),
        })?;
        let count = json(&CountKeys {
            key: &STANDARD.encode(format!("{resource}/")),
            range_end: &STANDARD.encode(format!("{resource}0")),
            count_only: true,
        })?;
        Ok(Etcd {
            connection,
            lock,
            count,
        })
    }

    /// Locks, waiting as long as it takes (etcd's lock call always waits).
    ///
    /// # Errors
    ///
    /// No answer, or no key in it.
    pub async fn lock(&mut self) -> Result<Key, String> {
        let locked: Locked = post(&mut self.connection, "/v3/lock/lock", self.lock.clone()).await?;
        Ok(Key(json(&Unlock { key: &locked.key })?))
    }

    /// Unlocks `key`.
    ///
    /// # Errors
    ///
    /// No answer, or one that is not a 200.
    pub async fn unlock(&mut self, key: Key) -> Result<(), String> {
        let _: serde::de::IgnoredAny = post(&mut self.connection, "/v3/lock/unlock", key.0).await?;
        Ok(())
    }

    /// How many wait for the lock: the keys under its name beyond the holder's.
    ///
    /// # Errors
    ///
    /// No answer, or one without a count.
    pub async fn waiting(&mut self) -> Result<usize, String> {
        let counted: Counted =
            post(&mut self.connection, "/v3/kv/range", self.count.clone()).await?;
        Ok(usize::try_from(counted.count.saturating_sub(1)).unwrap_or(0))
    }
}

fn json(body: &impl Serialize) -> Result<Bytes, String> {
    serde_json::to_vec(body)
        .map(Bytes::from)
        .map_err(|err| err.to_string())
}

/// `POST path` with `body`, read as `T`.
async fn call<T: for<'de> Deserialize<'de>>(
    connection: &mut Connection,
    path: &str,
    body: &impl Serialize,
) -> Result<T, String> {
    post(connection, path, json(body)?).await
}

/// `POST path` with a body serialized before, read as `T`.
async fn post<T: for<'de> Deserialize<'de>>(
    connection: &mut Connection,
    path: &str,
    body: Bytes,
) -> Result<T, String> {
    let answer = connection.send(Method::POST, path, Some(body)).await?;
    if answer.status != 200 {
        return Err(format!("POST {path} answered {}", answer.describe()));
    }
    serde_json::from_slice(&answer.body)
        .map_err(|err| format!("POST {path}: {err}: {}", answer.describe()))
}
