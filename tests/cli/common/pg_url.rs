//! A `postgres://` URL in the tests, taken apart to point it at another server, log in with
//! another password or change a setting.

/// A `postgres://` URL taken apart just enough to swap its server or password.
#[derive(Clone)]
pub struct PgUrl {
    pub scheme: String,
    pub user: String,
    pub password: Option<String>,
    /// `host:port` as written.
    pub server: String,
    /// `/db?query`, as written.
    pub rest: String,
}

impl PgUrl {
    pub fn parse(url: &str) -> PgUrl {
        let (scheme, after) = url.split_once("://").expect("a URL with a scheme");
        let end = after.find(['/', '?']).unwrap_or(after.len());
        let (authority, rest) = after.split_at(end);
        let (userinfo, server) = match authority.rsplit_once('@') {
            Some((userinfo, server)) => (userinfo, server),
            None => ("", authority),
        };
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => (user, Some(password.to_owned())),
            None => (userinfo, None),
        };
        PgUrl {
            scheme: scheme.to_owned(),
            user: user.to_owned(),
            password,
            server: server.to_owned(),
            rest: rest.to_owned(),
        }
    }

    pub fn with_server(&self, server: &str) -> PgUrl {
        PgUrl {
            server: server.to_owned(),
            ..self.clone()
        }
    }

    pub fn with_password(&self, password: Option<&str>) -> PgUrl {
        PgUrl {
            password: password.map(str::to_owned),
            ..self.clone()
        }
    }

    /// The URL with the query setting `key` set to `value` (replacing any earlier one).
    pub fn with_setting(&self, key: &str, value: &str) -> PgUrl {
        let (path, query) = self.rest.split_once('?').unwrap_or((&self.rest, ""));
        let mut settings: Vec<String> = query
            .split('&')
            .filter(|pair| !pair.is_empty() && pair.split('=').next() != Some(key))
            .map(str::to_owned)
            .collect();
        settings.push(format!("{key}={value}"));
        PgUrl {
            rest: format!("{path}?{}", settings.join("&")),
            ..self.clone()
        }
    }

    /// The URL without the query setting `key`.
    pub fn without_setting(&self, key: &str) -> PgUrl {
        let (path, query) = self.rest.split_once('?').unwrap_or((&self.rest, ""));
        let settings: Vec<&str> = query
            .split('&')
            .filter(|pair| !pair.is_empty() && pair.split('=').next() != Some(key))
            .collect();
        let rest = if settings.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{}", settings.join("&"))
        };
        PgUrl {
            rest,
            ..self.clone()
        }
    }
}

impl std::fmt::Display for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://", self.scheme)?;
        match (&self.password, self.user.is_empty()) {
            (Some(password), _) => write!(f, "{}:{password}@", self.user)?,
            (None, false) => write!(f, "{}@", self.user)?,
            (None, true) => {}
        }
        write!(f, "{}{}", self.server, self.rest)
    }
}
