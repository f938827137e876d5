//! A request's path and query string, read strictly: a `%` must begin an escape of two
//! hexadecimal digits (RFC 3986) wherever it is, a resource is one percent-encoded segment, and
//! a query parameter is taken once ([`Params`]): given twice, or not one the route takes, it is
//! refused naming it.

use std::time::Duration;

use super::Bad;
use crate::lock::{Resource, parse_duration};

/// Refuses a path that is not percent-encoded: a `%` not followed by two hexadecimal digits,
/// wherever it is (a route's name or a resource's).
///
/// # Errors
///
/// [`Bad::Encoding`] naming the first such `%`.
pub fn path(path: &str) -> Result<(), Bad> {
    percent_encoded("the path", path)
}

/// The resource named by a path segment, percent-decoded (`deploy%2Fprod` is `deploy/prod`).
///
/// # Errors
///
/// [`Bad::Encoding`] for a segment that is not percent-encoded; [`Bad::Invalid`] for a name
/// that is not UTF-8 once decoded, or breaks the rules of a resource name.
pub fn resource(segment: &str) -> Result<Resource, Bad> {
    percent_encoded("the resource", segment)?;
    let decoded = percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map_err(|_| Bad::Invalid("the resource is not valid UTF-8".into()))?;
    Resource::parse(&decoded).map_err(Bad::Invalid)
}

/// A query string's parameters, percent-decoded (`+` is a space, as forms send it).
///
/// # Errors
///
/// [`Bad::Encoding`] for a query that is not percent-encoded; [`Bad::Invalid`] for a
/// parameter that is not UTF-8 once decoded.
pub fn query(raw: Option<&str>) -> Result<Vec<(String, String)>, Bad> {
    percent_encoded("the query", raw.unwrap_or(""))?;
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(&text.replace('+', " "))
            .decode_utf8()
            .map(std::borrow::Cow::into_owned)
            .map_err(|_| Bad::Invalid("a query parameter is not valid UTF-8".into()))
    };
    raw.unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(key)?, decode(value)?))
        })
        .collect()
}

/// The parameters of `GET /locks` and `GET /log`, each taken once.
pub struct Params(Vec<(String, String)>);

impl Params {
    /// # Errors
    ///
    /// As [`query`]; [`Bad::Invalid`] for a parameter given twice, naming it.
    pub fn parse(raw: Option<&str>) -> Result<Params, Bad> {
        let params = query(raw)?;
        for (at, (name, _)) in params.iter().enumerate() {
            if params[..at].iter().any(|(seen, _)| seen == name) {
                return Err(Bad::Invalid(format!(
                    "the parameter {name:?} is given twice; give it once"
                )));
            }
        }
        Ok(Params(params))
    }

    pub(super) fn take(&mut self, name: &str) -> Option<String> {
        let at = self.0.iter().position(|(key, _)| key == name)?;
        Some(self.0.remove(at).1)
    }

    /// `since=D`, a duration as `--since` takes it (`90s`, `1h`).
    pub(super) fn duration(&mut self, name: &str) -> Result<Option<Duration>, Bad> {
        self.take(name)
            .map(|raw| {
                if raw.trim_start().starts_with('-') {
                    return Err(Bad::Invalid(format!(
                        "{name} must not be negative: it is how far back to look, such as 90s, \
                         15m, 2h or 1h30m (a number alone is seconds); got {raw:?}"
                    )));
                }
                parse_duration(&raw).map_err(|err| Bad::Invalid(format!("{name}: {err}")))
            })
            .transpose()
    }

    /// `limit=N`, a whole number from 0 up. A refusal says what is taken, and shows a number
    /// as a number (`got -1`, `got 1e300`), anything else quoted.
    pub(super) fn count(&mut self, name: &str) -> Result<Option<u64>, Bad> {
        self.take(name)
            .map(|raw| {
                raw.parse().map_err(|_| {
                    let number = !raw.is_empty()
                        && raw.parse::<f64>().is_ok()
                        && raw
                            .chars()
                            .all(|c| c.is_ascii_digit() || "+-.eE".contains(c));
                    let shown = if number {
                        raw.clone()
                    } else {
                        format!("{raw:?}")
                    };
                    Bad::Invalid(format!(
                        "{name} must be a whole number from 0 to {}, got {shown}",
                        u64::MAX
                    ))
                })
            })
            .transpose()
    }

    /// # Errors
    ///
    /// [`Bad::Invalid`] naming the first parameter that this request does not take.
    pub fn finish(self) -> Result<(), Bad> {
        match self.0.first() {
            None => Ok(()),
            Some((name, _)) => Err(Bad::Invalid(format!("unknown parameter {name:?}"))),
        }
    }
}

/// Refuses a `%` in `text` that is not followed by two hexadecimal digits (`%ZZ`, a `%` at
/// the end), which would otherwise be taken as it stands; `what` names the part of the request.
fn percent_encoded(what: &str, text: &str) -> Result<(), Bad> {
    let bytes = text.as_bytes();
    for (at, _) in text.match_indices('%') {
        let escape = bytes.get(at + 1..at + 3);
        if !escape.is_some_and(|pair| pair.iter().all(u8::is_ascii_hexdigit)) {
            let shown: String = text[at..].chars().take(3).collect();
            return Err(Bad::Encoding(format!(
                "invalid percent-encoding in {what}: {shown:?}; a % must be followed by two \
                 hexadecimal digits (%25 for % itself)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_one_percent_decoded_segment_checked_as_names() {
        assert_eq!(resource("deploy%2Fprod").unwrap().as_str(), "deploy/prod");
        assert_eq!(resource("payment:42").unwrap().as_str(), "payment:42");
        assert_eq!(
            resource("x%27%3B%20DROP%20TABLE%20locks%3B--")
                .unwrap()
                .as_str(),
            "x'; DROP TABLE locks;--"
        );
        assert_eq!(resource("z%C3%BCrich").unwrap().as_str(), "zürich");
        let long = "a".repeat(256);
        for bad in [long.as_str(), "%20", "a%0Ab", "%FF", ""] {
            assert!(matches!(resource(bad), Err(Bad::Invalid(_))), "{bad:?}");
        }
        assert!(resource(&"a".repeat(255)).is_ok());
    }

    #[test]
    fn a_percent_not_followed_by_two_hex_digits_is_a_400_in_the_path_and_the_query() {
        for segment in ["%ZZ", "a%", "a%2", "%2G", "ok%2Fthen%"] {
            match resource(segment) {
                Err(Bad::Encoding(why)) => assert!(
                    why.starts_with("invalid percent-encoding in the resource: \"%"),
                    "{segment}: {why}"
                ),
                other => panic!("{segment}: {other:?}"),
            }
        }
        assert_eq!(resource("%25ZZ").unwrap().as_str(), "%ZZ");
        assert!(matches!(path("/lo%ZZcks"), Err(Bad::Encoding(_))));
        assert!(path("/locks/a%2Fb").is_ok());
        assert_eq!(resource("%2f%2F").unwrap().as_str(), "//");
        assert!(matches!(query(Some("owner=%ZZ")), Err(Bad::Encoding(_))));
        assert!(matches!(query(Some("a%=1")), Err(Bad::Encoding(_))));
        assert!(query(Some("owner=%25")).is_ok());
    }

    #[test]
    fn a_parameter_given_twice_is_refused_naming_it() {
        for raw in [
            "owner=a&owner=b",
            "owner=a&owner=a",
            "resource=a&limit=1&resource=b",
        ] {
            let name = raw.split('=').next().unwrap();
            match Params::parse(Some(raw)) {
                Err(Bad::Invalid(why)) => assert_eq!(
                    why,
                    format!("the parameter {name:?} is given twice; give it once"),
                    "{raw}"
                ),
                Err(other) => panic!("{raw}: {other:?}"),
                Ok(_) => panic!("{raw}: taken"),
            }
        }
        assert!(Params::parse(Some("a=1&b=1")).is_ok());
    }

    #[test]
    fn since_says_what_is_wrong_with_a_duration() {
        let since = |raw: &str| Params::parse(Some(&format!("since={raw}")))?.duration("since");
        assert_eq!(since("90s"), Ok(Some(Duration::from_secs(90))));
        for raw in ["-1", "-1h", "%2D5m"] {
            match since(raw) {
                Err(Bad::Invalid(why)) => assert!(
                    why.starts_with(
                        "since must not be negative: it is how far back to look, \
                                     such as 90s, 15m, 2h or 1h30m"
                    ),
                    "{raw}: {why}"
                ),
                other => panic!("{raw}: {other:?}"),
            }
        }
        match since("soon") {
            Err(Bad::Invalid(why)) => assert!(why.contains("use forms like"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn query_parameters_are_decoded_taken_once_and_unknown_ones_refused() {
        let mut params = Params::parse(Some("prefix=a%2Fb&limit=5&since=1h")).unwrap();
        assert_eq!(params.take("prefix").as_deref(), Some("a/b"));
        assert_eq!(params.count("limit").unwrap(), Some(5));
        assert_eq!(
            params.duration("since").unwrap(),
            Some(Duration::from_secs(3600))
        );
        assert!(params.finish().is_ok());
        // (limit=, what the refusal shows)
        for (raw, shown) in [
            ("x", r#""x""#),
            ("inf", r#""inf""#),
            ("-1", "-1"),
            ("1.5", "1.5"),
            ("1e300", "1e300"),
            ("18446744073709551616", "18446744073709551616"),
        ] {
            let mut params = Params::parse(Some(&format!("limit={raw}"))).unwrap();
            assert_eq!(
                params.count("limit"),
                Err(Bad::Invalid(format!(
                    "limit must be a whole number from 0 to 18446744073709551615, got {shown}"
                ))),
                "{raw}"
            );
        }
        let params = Params::parse(Some("prefx=a")).unwrap();
        assert!(matches!(params.finish(), Err(Bad::Invalid(_))));
        assert_eq!(
            query(Some("owner=w+1&x")).unwrap(),
            vec![("owner".into(), "w 1".into()), ("x".into(), String::new())]
        );
    }
}
