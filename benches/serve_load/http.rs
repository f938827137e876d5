//! The generator's HTTP: one keep-alive HTTP/1.1 connection per client ([`Connection`]), made
//! with hyper's own client on the generator's runtime, to a server on `http://host:port`
//! ([`Endpoint`]). Nothing here knows distlock's or etcd's API: a request is a method, a path
//! and maybe a JSON body; an answer a status and a body.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// How long a connection may take to be accepted.
const CONNECT: Duration = Duration::from_secs(20);

/// How long a request may go unanswered: a waiting request is answered within 30 s, and a
/// server that stops answering must not hold a run for ever.
const ANSWER: Duration = Duration::from_secs(120);

/// Where a server listens, and what every request to it carries.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The URL as given, for the report.
    pub url: String,
    address: SocketAddr,
    host: HeaderValue,
    /// `Bearer <secret>`, marked sensitive (never shown).
    authorization: Option<HeaderValue>,
}

impl Endpoint {
    /// The server at `url` (`http://host:port`, resolved once here).
    ///
    /// # Errors
    ///
    /// A URL that is not `http://host:port`, or a host that does not resolve.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let url = url.trim_end_matches('/');
        let authority = url.strip_prefix("http://").ok_or_else(|| {
            format!("{url}: the load generator speaks plain http:// to a server on this machine")
        })?;
        if authority.contains('/') {
            return Err(format!("{url}: give the server's base URL, without a path"));
        }
        let address = authority
            .to_socket_addrs()
            .map_err(|err| format!("{url}: {err}"))?
            .next()
            .ok_or_else(|| format!("{url}: the host has no address"))?;
        let host = HeaderValue::from_str(authority).map_err(|err| format!("{url}: {err}"))?;
        Ok(Endpoint {
            url: url.to_owned(),
            address,
            host,
            authorization: None,
        })
    }

    /// The same server, every request carrying `Authorization: Bearer <secret>`.
    ///
    /// # Errors
    ///
    /// A secret that cannot be a header's value (the secret is not named).
    pub fn with_token(mut self, secret: &str) -> Result<Endpoint, String> {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", secret.trim()))
            .map_err(|_| "the token is not a header's value".to_owned())?;
        value.set_sensitive(true);
        self.authorization = Some(value);
        Ok(self)
    }
}

/// An answer: its status and its whole body.
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    /// The body as text, for a report of something unexpected.
    pub fn describe(&self) -> String {
        format!("{} {}", self.status, String::from_utf8_lossy(&self.body))
    }
}

/// One keep-alive connection, which sends one request at a time.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    endpoint: Endpoint,
}

impl Connection {
    /// Connects to `endpoint` (`TCP_NODELAY`: a request goes out as soon as it is written),
    /// and drives the connection on a task of the runtime until this is dropped.
    ///
    /// # Errors
    ///
    /// No connection within 20 s, or the handshake failed.
    pub async fn open(endpoint: &Endpoint) -> Result<Connection, String> {
        let url = &endpoint.url;
        let stream = tokio::time::timeout(CONNECT, TcpStream::connect(endpoint.address))
            .await
            .map_err(|_| format!("{url}: no connection within {CONNECT:?}"))?
            .map_err(|err| format!("{url}: {err}"))?;
        stream
            .set_nodelay(true)
            .map_err(|err| format!("{url}: {err}"))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|err| format!("{url}: {err}"))?;
        // Ends when the server closes the connection or the sender is dropped; the next
        // request then fails, and says so.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Connection {
            sender,
            endpoint: endpoint.clone(),
        })
    }

    /// Sends `method` on `path`, with `body` as JSON if given, and reads the whole answer.
    ///
    /// # Errors
    ///
    /// The connection failed or was closed before the answer was whole, or no whole answer
    /// came within 120 s.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Answer, String> {
        match tokio::time::timeout(ANSWER, self.exchange(&method, path, body)).await {
            Ok(answer) => answer,
            Err(_) => Err(format!(
                "{method} {path} to {}: no answer within {ANSWER:?}",
                self.endpoint.url
            )),
        }
    }

    async fn exchange(
        &mut self,
        method: &Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Answer, String> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.endpoint.host.clone());
        if let Some(authorization) = &self.endpoint.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        if body.is_some() {
            request = request.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let request = request
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|err| format!("{method} {path}: {err}"))?;
        let what = || format!("{method} {path} to {}", self.endpoint.url);
        self.sender
            .ready()
            .await
            .map_err(|err| format!("{}: {err}", what()))?;
        let answer = self
            .sender
            .send_request(request)
            .await
            .map_err(|err| format!("{}: {err}", what()))?;
        let status = answer.status().as_u16();
        let body = answer
            .into_body()
            .collect()
            .await
            .map_err(|err| format!("{}: reading the answer: {err}", what()))?
            .to_bytes();
        Ok(Answer { status, body })
    }
}
