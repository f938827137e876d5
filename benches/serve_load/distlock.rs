//! A client of `distlock serve` on one resource, written with the crate's own API: each request
//! is a route and a typed body of `distlock::protocol`, each answer read as the crate's answer
//! type. Its bodies and paths are made once, when the client is: a pair then costs the
//! generator two requests and one answer to read.

use distlock::answer::{AcquireAnswer, StatusAnswer};
use distlock::engine::Request;
use distlock::lock::{Members, Owner, Resource, Shape, Ttl};
use distlock::protocol::{AcquireRequest, End, ReleaseRequest, Route, Target};
use hyper::Method;
use hyper::body::Bytes;

use crate::http::{Answer, Connection, Endpoint};

/// What a client sends about its resource, serialized once.
struct Requests {
    resource: Resource,
    /// `POST /locks/{r}` and `DELETE /locks/{r}`: one path.
    path: String,
    acquire: Bytes,
    release: Bytes,
    status_path: String,
}

/// One owner's client of one resource, on a keep-alive connection of its own.
pub struct Distlock {
    connection: Connection,
    requests: Requests,
    owner: Owner,
    ttl: Ttl,
}

/// How an acquire came out.
pub enum Acquired {
    Granted,
    /// Busy (a request that did not wait, or whose wait ran out).
    Busy,
}

impl Distlock {
    /// `owner`'s client of `resource`, taking it for `ttl` seconds.
    ///
    /// # Errors
    ///
    /// An invalid name or TTL, or no connection.
    pub async fn open(
        endpoint: &Endpoint,
        resource: &str,
        owner: &str,
        ttl: u64,
    ) -> Result<Distlock, String> {
        let resource = Resource::parse(resource)?;
        let owner = Owner::parse(owner)?;
        let ttl = Ttl::from_secs(ttl)?;
        let connection = Connection::open(endpoint).await?;
        let mut client = Distlock {
            connection,
            requests: Requests {
                path: Route::Acquire(Target::One(resource.clone())).path(),
                status_path: Route::Status(resource.clone()).path(),
                resource,
                acquire: Bytes::new(),
                release: Bytes::new(),
            },
            owner,
            ttl,
        };
        client.requests.acquire = json(&client.acquire_request(None))?;
        client.requests.release = json(&client.release_request())?;
        Ok(client)
    }

    fn acquire_request(&self, wait_seconds: Option<u64>) -> AcquireRequest {
        AcquireRequest {
            members: Members::one(self.requests.resource.clone()),
            shape: Shape::One,
            request: Request::exclusive(self.owner.clone(), self.ttl),
            wait_seconds,
        }
    }

    fn release_request(&self) -> ReleaseRequest {
        ReleaseRequest {
            members: Members::one(self.requests.resource.clone()),
            shape: Shape::One,
            owner: self.owner.clone(),
            fences: None,
            end: End::Release,
        }
    }

    /// Acquires the resource, waiting in line for up to `wait_seconds` (none: at once).
    ///
    /// # Errors
    ///
    /// No answer, or an answer that is not an acquire's.
    pub async fn acquire(&mut self, wait_seconds: Option<u64>) -> Result<Acquired, String> {
        read_acquire(&self.send_acquire(wait_seconds).await?)
    }

    /// Sends an acquire as [`Distlock::acquire`] does, and gives its answer as it came, for
    /// a caller that counts statuses.
    ///
    /// # Errors
    ///
    /// No whole answer.
    pub async fn send_acquire(&mut self, wait_seconds: Option<u64>) -> Result<Answer, String> {
        let body = match wait_seconds {
            None => self.requests.acquire.clone(),
            Some(_) => json(&self.acquire_request(wait_seconds))?,
        };
        self.connection
            .send(Method::POST, &self.requests.path, Some(body))
            .await
    }

    /// Releases the owner's tenure.
    ///
    /// # Errors
    ///
    /// No answer, or any answer but 204 (released).
    pub async fn release(&mut self) -> Result<(), String> {
        let body = self.requests.release.clone();
        let answer = self
            .connection
            .send(Method::DELETE, &self.requests.path, Some(body))
            .await?;
        if answer.status == 204 {
            Ok(())
        } else {
            Err(format!("release answered {}", answer.describe()))
        }
    }

    /// How many wait for the resource (`GET /locks/{r}`: `waiting`, whether it is held or
    /// free).
    ///
    /// # Errors
    ///
    /// No answer, or an answer that is not a status.
    pub async fn waiting(&mut self) -> Result<usize, String> {
        let answer = self
            .connection
            .send(Method::GET, &self.requests.status_path, None)
            .await?;
        read_status(&answer)
    }
}

/// The body of `request`, as JSON.
fn json(request: &impl serde::Serialize) -> Result<Bytes, String> {
    serde_json::to_vec(request)
        .map(Bytes::from)
        .map_err(|err| err.to_string())
}

/// A 200 with an acquire's answer.
pub fn read_acquire(answer: &Answer) -> Result<Acquired, String> {
    if answer.status != 200 {
        return Err(format!("acquire answered {}", answer.describe()));
    }
    match serde_json::from_slice::<AcquireAnswer>(&answer.body) {
        Ok(AcquireAnswer::Acquired(_)) => Ok(Acquired::Granted),
        Ok(AcquireAnswer::Busy(_)) => Ok(Acquired::Busy),
        Ok(AcquireAnswer::Mismatch(_)) => Err(format!("acquire: mismatch: {}", answer.describe())),
        Err(err) => Err(format!("acquire: {err}: {}", answer.describe())),
    }
}

/// `status`'s count of waiters: a 200 (held) or a 404 (free), whose problem document carries
/// the command's own members.
fn read_status(answer: &Answer) -> Result<usize, String> {
    if !matches!(answer.status, 200 | 404) {
        return Err(format!("status answered {}", answer.describe()));
    }
    match serde_json::from_slice::<StatusAnswer>(&answer.body) {
        Ok(StatusAnswer::Held(held)) => Ok(held.waiting),
        Ok(StatusAnswer::Free(free)) => Ok(free.waiting),
        Err(err) => Err(format!("status: {err}: {}", answer.describe())),
    }
}
