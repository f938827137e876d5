//! What the loops drive: a server ([`Target`]), distlock's or etcd's, and a client of one
//! resource on it ([`Client`]) with the calls a pair is made of, so that each mode is written
//! once for both.

use crate::distlock::{Acquired, Distlock};
use crate::etcd::{Etcd, Key};
use crate::http::Endpoint;

/// The server driven.
#[derive(Clone, Debug)]
pub enum Target {
    Distlock(Endpoint),
    Etcd(Endpoint),
}

impl Target {
    pub fn name(&self) -> &'static str {
        match self {
            Target::Distlock(_) => "distlock",
            Target::Etcd(_) => "etcd",
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        match self {
            Target::Distlock(endpoint) | Target::Etcd(endpoint) => endpoint,
        }
    }
}

/// One client of one resource, on a connection of its own.
pub enum Client {
    Distlock(Distlock),
    Etcd(Etcd),
}

/// What a client holds between its acquire and its release.
pub enum Held {
    Distlock,
    Etcd(Key),
}

impl Client {
    /// `owner`'s client of `resource` on `target` (etcd: on a lease of `ttl` granted now).
    ///
    /// # Errors
    ///
    /// No connection, or (etcd) no lease.
    pub async fn open(
        target: &Target,
        resource: &str,
        owner: &str,
        ttl: u64,
    ) -> Result<Client, String> {
        Ok(match target {
            Target::Distlock(endpoint) => {
                Client::Distlock(Distlock::open(endpoint, resource, owner, ttl).await?)
            }
            Target::Etcd(endpoint) => Client::Etcd(Etcd::open(endpoint, resource, ttl).await?),
        })
    }

    /// Acquires the resource; with `wait_seconds`, waiting in line (etcd's lock always waits).
    ///
    /// # Errors
    ///
    /// No answer, or the resource not acquired.
    pub async fn acquire(&mut self, wait_seconds: Option<u64>) -> Result<Held, String> {
        match self {
            Client::Distlock(client) => match client.acquire(wait_seconds).await? {
                Acquired::Granted => Ok(Held::Distlock),
                Acquired::Busy => Err("not acquired: busy".to_owned()),
            },
            Client::Etcd(client) => client.lock().await.map(Held::Etcd),
        }
    }

    /// # Errors
    ///
    /// No answer, or the release refused.
    pub async fn release(&mut self, held: Held) -> Result<(), String> {
        match (self, held) {
            (Client::Distlock(client), Held::Distlock) => client.release().await,
            (Client::Etcd(client), Held::Etcd(key)) => client.unlock(key).await,
            _ => Err("held by another kind of client".to_owned()),
        }
    }

    /// How many wait for the resource: a read of its state.
    ///
    /// # Errors
    ///
    /// No answer, or not the answer of a read.
    pub async fn waiting(&mut self) -> Result<usize, String> {
        match self {
            Client::Distlock(client) => client.waiting().await,
            Client::Etcd(client) => client.waiting().await,
        }
    }
}
