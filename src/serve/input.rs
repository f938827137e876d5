//! What a request asks, read and checked before the store is touched: the JSON bodies, the
//! query strings, and the resource in the path. Every field is checked as the command line
//! checks its flag (the same parsers), and a JSON value must already have the field's type:
//! `"3600"` or `60.5` is no TTL (ATK-08). What is wrong becomes a [`Bad`], which the server
//! answers with 400 (unreadable JSON) or 422 (a readable request that breaks a rule).

use std::time::Duration;

use serde_json::{Map, Value};

use crate::engine::Request;
use crate::lock::{Fence, Members, Mode, Owner, Remark, Resource, Ttl, parse_duration};

/// The longest `wait_seconds`.
pub const MAX_WAIT_SECS: u64 = 86_400;

/// Why a request cannot be carried out as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bad {
    /// The body is not JSON, or not a JSON object (400).
    Malformed(String),
    /// A field or parameter breaks a rule (422).
    Invalid(String),
}

/// A JSON body's fields, taken one by one; [`Fields::finish`] refuses any left unread.
pub struct Fields(Map<String, Value>);

impl Fields {
    /// The fields of `body`: a JSON object, or nothing at all (an empty body, for a request
    /// whose fields are all optional or given in the query).
    ///
    /// # Errors
    ///
    /// [`Bad::Malformed`] for a body that is not a JSON object.
    pub fn parse(body: &[u8]) -> Result<Fields, Bad> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Fields(Map::new()));
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(map)) => Ok(Fields(map)),
            Ok(_) => Err(Bad::Malformed("the body must be a JSON object".into())),
            Err(err) => Err(Bad::Malformed(format!("the body is not valid JSON: {err}"))),
        }
    }

    fn take(&mut self, name: &str) -> Option<Value> {
        self.0.remove(name)
    }

    /// A string field that must be there.
    fn string(&mut self, name: &str) -> Result<String, Bad> {
        self.optional_string(name)?
            .ok_or_else(|| Bad::Invalid(format!("{name} is required")))
    }

    fn optional_string(&mut self, name: &str) -> Result<Option<String>, Bad> {
        match self.take(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(Bad::Invalid(format!(
                "{name} must be a string, got {other}"
            ))),
        }
    }

    /// A whole number, as a JSON integer (not a string, not a fraction).
    fn optional_integer(&mut self, name: &str) -> Result<Option<i64>, Bad> {
        match self.take(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(number)) => match number.as_i64() {
                Some(n) => Ok(Some(n)),
                None => Err(Bad::Invalid(format!(
                    "{name} must be a whole number, got {number}"
                ))),
            },
            Some(other) => Err(Bad::Invalid(format!(
                "{name} must be a JSON integer, got {other}"
            ))),
        }
    }

    fn optional_bool(&mut self, name: &str) -> Result<Option<bool>, Bad> {
        match self.take(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(flag)),
            Some(other) => Err(Bad::Invalid(format!(
                "{name} must be true or false, got {other}"
            ))),
        }
    }

    pub fn owner(&mut self) -> Result<Owner, Bad> {
        let raw = self.string("owner")?;
        Owner::parse(&raw).map_err(Bad::Invalid)
    }

    /// `owner`, when the request may name one (`break`).
    pub fn optional_owner(&mut self) -> Result<Option<Owner>, Bad> {
        self.optional_string("owner")?
            .map(|raw| Owner::parse(&raw).map_err(Bad::Invalid))
            .transpose()
    }

    /// `owner` from the body, or else from the query (`?owner=`), as `DELETE` takes it.
    pub fn owner_or(&mut self, query: Option<&str>) -> Result<Owner, Bad> {
        match (self.0.contains_key("owner"), query) {
            (false, Some(raw)) => Owner::parse(raw).map_err(Bad::Invalid),
            _ => self.owner(),
        }
    }

    pub fn ttl(&mut self) -> Result<Ttl, Bad> {
        let Some(secs) = self.optional_integer("ttl_seconds")? else {
            return Err(Bad::Invalid("ttl_seconds is required".into()));
        };
        u64::try_from(secs)
            .map_err(|_| format!("ttl must be between 1s and 365 days, got {secs}s"))
            .and_then(Ttl::from_secs)
            .map_err(Bad::Invalid)
    }

    pub fn fence(&mut self) -> Result<Option<Fence>, Bad> {
        match self.take("fence") {
            None | Some(Value::Null) => Ok(None),
            Some(value) => fence_of("fence", &value).map(Some),
        }
    }

    /// A whole number of seconds in `least..=most`.
    pub fn seconds(&mut self, name: &str, least: u64, most: u64) -> Result<Option<Duration>, Bad> {
        match self.optional_integer(name)? {
            None => Ok(None),
            Some(secs) => match u64::try_from(secs) {
                Ok(secs) if (least..=most).contains(&secs) => Ok(Some(Duration::from_secs(secs))),
                _ => Err(Bad::Invalid(format!(
                    "{name} must be between {least} and {most}, got {secs}"
                ))),
            },
        }
    }

    /// `shared` and `limit`, as `--shared` and `--limit N`.
    pub fn mode(&mut self) -> Result<Mode, Bad> {
        let shared = self.optional_bool("shared")?.unwrap_or(false);
        let limit = self.optional_integer("limit")?;
        match (shared, limit) {
            (true, Some(_)) => Err(Bad::Invalid(
                "shared and limit cannot be used together".into(),
            )),
            (true, None) => Ok(Mode::Shared),
            (false, None) => Ok(Mode::Exclusive),
            (false, Some(n)) => Mode::parse_limit(&n.to_string()).map_err(Bad::Invalid),
        }
    }

    /// A flag: `true` or `false`; absent, `false`.
    pub fn flag(&mut self, name: &str) -> Result<bool, Bad> {
        Ok(self.optional_bool(name)?.unwrap_or(false))
    }

    /// A note, reason or name of who breaks a lock, as `--note`, `--reason`, `--by`.
    pub fn remark(&mut self, name: &str) -> Result<Option<Remark>, Bad> {
        self.optional_string(name)?
            .map(|text| Remark::parse(&text).map_err(Bad::Invalid))
            .transpose()
    }

    /// The request of `POST /locks/{r}`; its `wait_seconds` apart.
    pub fn acquire(&mut self) -> Result<(Request, Duration), Bad> {
        let owner = self.owner()?;
        let ttl = self.ttl()?;
        let mode = self.mode()?;
        let note = self.remark("note")?;
        let wait = self
            .seconds("wait_seconds", 0, MAX_WAIT_SECS)?
            .unwrap_or_default();
        // `distlock run` through the server: its tenure is guarded by that run.
        let guarded = self.optional_bool("guarded")?.unwrap_or(false);
        let request = Request {
            owner,
            ttl,
            mode,
            note,
            waits: false,
            guarded,
        };
        Ok((request, wait))
    }

    /// `resources` of a lock set's request: an array of resource names, each checked as a
    /// path segment's decoded name is; repeats collapse, and 1 to [`crate::lock::MAX_MEMBERS`]
    /// remain.
    pub fn members(&mut self) -> Result<Members, Bad> {
        let items = match self.take("resources") {
            None | Some(Value::Null) => return Err(Bad::Invalid("resources is required".into())),
            Some(Value::Array(items)) => items,
            Some(other) => {
                return Err(Bad::Invalid(format!(
                    "resources must be an array of resource names, got {other}"
                )));
            }
        };
        let resources = items
            .iter()
            .enumerate()
            .map(|(at, item)| match item {
                Value::String(name) => Resource::parse(name)
                    .map_err(|why| Bad::Invalid(format!("resources[{at}]: {why}"))),
                other => Err(Bad::Invalid(format!(
                    "resources[{at}] must be a string, got {other}"
                ))),
            })
            .collect::<Result<Vec<Resource>, Bad>>()?;
        Members::new(resources).map_err(Bad::Invalid)
    }

    /// `fences` of a lock set's `renew` or `release`: `{name: fence}` naming every member and
    /// nothing else, read into the members' order; none when the field is not given.
    pub fn fences(&mut self, members: &Members) -> Result<Option<Vec<Fence>>, Bad> {
        let mut given = match self.take("fences") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(given)) => given,
            Some(other) => {
                return Err(Bad::Invalid(format!(
                    "fences must be an object of resource name to fence, got {other}"
                )));
            }
        };
        let member = |name: &str| members.as_slice().iter().any(|m| m.as_str() == name);
        if let Some(name) = given.keys().find(|name| !member(name)) {
            return Err(Bad::Invalid(format!(
                "fences names {name:?}, which is not one of the set's resources"
            )));
        }
        members
            .as_slice()
            .iter()
            .map(|member| match given.remove(member.as_str()) {
                None => Err(Bad::Invalid(format!("fences gives no fence for {member}"))),
                Some(value) => fence_of(&format!("the fence of {member}"), &value),
            })
            .collect::<Result<Vec<Fence>, Bad>>()
            .map(Some)
    }

    /// # Errors
    ///
    /// [`Bad::Invalid`] naming the first field that this request does not take.
    pub fn finish(self) -> Result<(), Bad> {
        match self.0.keys().next() {
            None => Ok(()),
            Some(name) => Err(Bad::Invalid(format!("unknown field {name:?}"))),
        }
    }
}

/// The resource named by a path segment, percent-decoded (`deploy%2Fprod` is `deploy/prod`).
///
/// # Errors
///
/// [`Bad::Invalid`] for a name that is not UTF-8 once decoded, or breaks the rules of a
/// resource name.
pub fn resource(segment: &str) -> Result<Resource, Bad> {
    let decoded = percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map_err(|_| Bad::Invalid("the resource is not valid UTF-8".into()))?;
    Resource::parse(&decoded).map_err(Bad::Invalid)
}

/// A query string's parameters, percent-decoded (`+` is a space, as forms send it).
///
/// # Errors
///
/// [`Bad::Invalid`] for a parameter that is not UTF-8 once decoded.
pub fn query(raw: Option<&str>) -> Result<Vec<(String, String)>, Bad> {
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
    /// As [`query`].
    pub fn parse(raw: Option<&str>) -> Result<Params, Bad> {
        query(raw).map(Params)
    }

    pub fn take(&mut self, name: &str) -> Option<String> {
        let at = self.0.iter().position(|(key, _)| key == name)?;
        Some(self.0.remove(at).1)
    }

    /// `since=D`, a duration as `--since` takes it (`90s`, `1h`).
    pub fn duration(&mut self, name: &str) -> Result<Option<Duration>, Bad> {
        self.take(name)
            .map(|raw| parse_duration(&raw).map_err(|err| Bad::Invalid(format!("{name}: {err}"))))
            .transpose()
    }

    pub fn count(&mut self, name: &str) -> Result<Option<u64>, Bad> {
        self.take(name)
            .map(|raw| {
                raw.parse().map_err(|_| {
                    Bad::Invalid(format!("{name} must be a whole number, got {raw:?}"))
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

/// A fence as a request gives it: a JSON integer from 1 up (fences start at 1), `what`
/// naming it in the refusal.
fn fence_of(what: &str, value: &Value) -> Result<Fence, Bad> {
    match value {
        Value::Number(number) => match number.as_i64() {
            Some(fence) if fence >= 1 => Ok(Fence(fence)),
            _ if number.is_f64() => Err(Bad::Invalid(format!(
                "{what} must be a whole number, got {number}"
            ))),
            _ => Err(Bad::Invalid(format!(
                "{what} must be a fence, from 1 to {}, got {number}",
                i64::MAX
            ))),
        },
        other => Err(Bad::Invalid(format!(
            "{what} must be a JSON integer, got {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn acquire(body: &str) -> Result<(Request, Duration), Bad> {
        let mut fields = Fields::parse(body.as_bytes())?;
        let read = fields.acquire()?;
        fields.finish()?;
        Ok(read)
    }

    fn invalid(result: Result<(Request, Duration), Bad>) -> String {
        match result {
            Err(Bad::Invalid(why)) => why,
            other => panic!("expected a 422, got {other:?}"),
        }
    }

    #[test]
    fn acquire_bodies_are_checked_field_by_field_as_the_command_line_checks_flags() {
        let (request, wait) = acquire(r#"{"owner":"w1","ttl_seconds":30}"#).unwrap();
        assert_eq!(request.owner.as_str(), "w1");
        assert_eq!(request.ttl.as_duration(), Duration::from_secs(30));
        assert_eq!(request.mode, Mode::Exclusive);
        assert_eq!(wait, Duration::ZERO);
        let (request, wait) = acquire(
            r#"{"owner":" w1 ","ttl_seconds":31536000,"limit":3,"note":"n","wait_seconds":86400}"#,
        )
        .unwrap();
        assert_eq!(
            request.owner.as_str(),
            "w1",
            "owners are trimmed, as on the command line"
        );
        assert_eq!(request.mode, Mode::Semaphore(3));
        assert_eq!(request.note.as_ref().map(Remark::as_str), Some("n"));
        assert_eq!(wait, Duration::from_secs(86_400));
        let (request, _) = acquire(r#"{"owner":"w","ttl_seconds":1,"shared":true}"#).unwrap();
        assert_eq!(request.mode, Mode::Shared);
        // As `--limit 1`: the plain exclusive lock.
        let (request, _) = acquire(r#"{"owner":"w","ttl_seconds":1,"limit":1}"#).unwrap();
        assert_eq!(request.mode, Mode::Exclusive);

        // (body, a word the 422's detail must contain)
        let refused = [
            (r#"{"owner":"w1"}"#, "ttl_seconds is required"),
            (r#"{"owner":"w1","ttl_seconds":"3600"}"#, "JSON integer"),
            (r#"{"owner":"w1","ttl_seconds":60.5}"#, "whole number"),
            (
                r#"{"owner":"w1","ttl_seconds":0}"#,
                "between 1s and 365 days",
            ),
            (
                r#"{"owner":"w1","ttl_seconds":-100}"#,
                "between 1s and 365 days",
            ),
            (
                r#"{"owner":"w1","ttl_seconds":31536001}"#,
                "between 1s and 365 days",
            ),
            (r#"{"owner":"w1","ttl_seconds":1e3}"#, "whole number"),
            (r#"{"owner":"w1","ttl_seconds":true}"#, "JSON integer"),
            (r#"{"ttl_seconds":30}"#, "owner is required"),
            (r#"{"owner":"","ttl_seconds":30}"#, "owner"),
            (r#"{"owner":"   ","ttl_seconds":30}"#, "owner"),
            (r#"{"owner":7,"ttl_seconds":30}"#, "must be a string"),
            (r#"{"owner":"w","ttl_seconds":30,"limit":0}"#, "limit"),
            (r#"{"owner":"w","ttl_seconds":30,"limit":10001}"#, "limit"),
            (
                r#"{"owner":"w","ttl_seconds":30,"limit":"2"}"#,
                "JSON integer",
            ),
            (
                r#"{"owner":"w","ttl_seconds":30,"shared":true,"limit":2}"#,
                "together",
            ),
            (
                r#"{"owner":"w","ttl_seconds":30,"shared":"yes"}"#,
                "true or false",
            ),
            (
                r#"{"owner":"w","ttl_seconds":30,"wait_seconds":86401}"#,
                "wait_seconds",
            ),
            (
                r#"{"owner":"w","ttl_seconds":30,"wait_seconds":-1}"#,
                "wait_seconds",
            ),
            (
                r#"{"owner":"w","ttl_seconds":30,"colour":"red"}"#,
                "unknown field \"colour\"",
            ),
        ];
        for (body, word) in refused {
            let why = invalid(acquire(body));
            assert!(why.contains(word), "{body}: {why}");
        }
        for body in ["{", "[1]", "\"x\"", "{\"owner\":\"w\",}", "null"] {
            assert!(
                matches!(acquire(body), Err(Bad::Malformed(_))),
                "{body}: {:?}",
                acquire(body)
            );
        }
    }

    /// The members of a set's body that holds nothing else.
    fn members_of(body: &str) -> Result<Members, Bad> {
        let mut fields = Fields::parse(body.as_bytes())?;
        let members = fields.members()?;
        fields.finish()?;
        Ok(members)
    }

    /// `{"resources":[…]}` with these names.
    fn resources(names: &[String]) -> String {
        json!({ "resources": names }).to_string()
    }

    #[test]
    fn a_sets_resources_are_names_deduplicated_and_sorted_one_to_64_of_them() {
        let numbered = |n: usize| -> Vec<String> { (0..n).map(|i| format!("r{i:02}")).collect() };
        let longest = "a".repeat(255);
        let all = numbered(64);
        let mut repeated = numbered(64);
        repeated.extend(["r00".to_owned(), "r63".to_owned(), "r07".to_owned()]);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        // (body, the members by resource, or a word of the 422's detail)
        let cases: Vec<(String, Result<Vec<&str>, &str>)> = vec![
            (r#"{"resources":["b","a"]}"#.into(), Ok(vec!["a", "b"])),
            (r#"{"resources":["a","a","a"]}"#.into(), Ok(vec!["a"])),
            (
                r#"{"resources":["db","cache","db"]}"#.into(),
                Ok(vec!["cache", "db"]),
            ),
            // A JSON string is the name itself: nothing is percent-decoded.
            (
                r#"{"resources":["deploy%2Fprod","deploy/prod"]}"#.into(),
                Ok(vec!["deploy%2Fprod", "deploy/prod"]),
            ),
            (
                resources(std::slice::from_ref(&longest)),
                Ok(vec![&longest]),
            ),
            (resources(&numbered(64)), Ok(all.clone())),
            (resources(&repeated), Ok(all)),
            (r#"{"resources":[]}"#.into(), Err("at least one resource")),
            (
                resources(&numbered(65)),
                Err("at most 64 resources; 65 were given"),
            ),
            ("{}".into(), Err("resources is required")),
            (r#"{"resources":null}"#.into(), Err("resources is required")),
            (r#"{"resources":"a"}"#.into(), Err("must be an array")),
            (r#"{"resources":{"a":1}}"#.into(), Err("must be an array")),
            (
                r#"{"resources":["a",7]}"#.into(),
                Err("resources[1] must be a string"),
            ),
            (r#"{"resources":["a",null]}"#.into(), Err("resources[1]")),
            (r#"{"resources":[["a"]]}"#.into(), Err("resources[0]")),
            (r#"{"resources":["a",""]}"#.into(), Err("resources[1]: ")),
            (r#"{"resources":["  "]}"#.into(), Err("blank")),
            (
                r#"{"resources":["a\nb"]}"#.into(),
                Err("control characters"),
            ),
            (resources(&["a".repeat(256)]), Err("256 bytes long")),
            (
                r#"{"resources":["a"],"resource":"b"}"#.into(),
                Err(r#"unknown field "resource""#),
            ),
        ];
        for (body, expected) in cases {
            match (members_of(&body), expected) {
                (Ok(members), Ok(names)) => {
                    let got: Vec<&str> = members.as_slice().iter().map(Resource::as_str).collect();
                    assert_eq!(got, names, "{body}");
                }
                (Err(Bad::Invalid(why)), Err(word)) => {
                    assert!(why.contains(word), "{body}: {why}");
                }
                (got, want) => panic!("{body}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_sets_fences_name_every_member_and_nothing_else() {
        let members = Members::new(vec![
            Resource::parse("b").unwrap(),
            Resource::parse("a").unwrap(),
        ])
        .unwrap();
        // (body, the fences in the members' order, or a word of the 422's detail)
        type Expected = Result<Option<Vec<i64>>, &'static str>;
        let cases: Vec<(&str, Expected)> = vec![
            ("{}", Ok(None)),
            (r#"{"fences":null}"#, Ok(None)),
            (r#"{"fences":{"a":1,"b":2}}"#, Ok(Some(vec![1, 2]))),
            (r#"{"fences":{"b":2,"a":1}}"#, Ok(Some(vec![1, 2]))),
            (r#"{"fences":{"a":1}}"#, Err("no fence for b")),
            (r#"{"fences":{}}"#, Err("no fence for a")),
            (
                r#"{"fences":{"a":1,"b":2,"c":3}}"#,
                Err(r#"fences names "c", which is not one of the set's resources"#),
            ),
            (r#"{"fences":{"a":1,"c":3}}"#, Err(r#"names "c""#)),
            (r#"{"fences":{"a":1,"b":"2"}}"#, Err("JSON integer")),
            (r#"{"fences":{"a":1,"b":2.5}}"#, Err("whole number")),
            (r#"{"fences":{"a":1,"b":-1}}"#, Err("from 1 to")),
            (r#"{"fences":{"a":1,"b":0}}"#, Err("from 1 to")),
            (
                r#"{"fences":{"a":1,"b":18446744073709551615}}"#,
                Err("from 1 to 9223372036854775807, got 18446744073709551615"),
            ),
            (r#"{"fences":{"a":1,"b":null}}"#, Err("JSON integer")),
            (r#"{"fences":[1,2]}"#, Err("must be an object")),
            (r#"{"fences":7}"#, Err("must be an object")),
        ];
        for (body, expected) in cases {
            let mut fields = Fields::parse(body.as_bytes()).unwrap();
            let got = fields
                .fences(&members)
                .map(|fences| fences.map(|f| f.iter().map(|fence| fence.0).collect::<Vec<_>>()));
            match (got, expected) {
                (Ok(fences), Ok(want)) => assert_eq!(fences, want, "{body}"),
                (Err(Bad::Invalid(why)), Err(word)) => {
                    assert!(why.contains(word), "{body}: {why}");
                }
                (got, want) => panic!("{body}: got {got:?}, want {want:?}"),
            }
        }
    }

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
    fn query_parameters_are_decoded_taken_once_and_unknown_ones_refused() {
        let mut params = Params::parse(Some("prefix=a%2Fb&limit=5&since=1h")).unwrap();
        assert_eq!(params.take("prefix").as_deref(), Some("a/b"));
        assert_eq!(params.count("limit").unwrap(), Some(5));
        assert_eq!(
            params.duration("since").unwrap(),
            Some(Duration::from_secs(3600))
        );
        assert!(params.finish().is_ok());
        let mut params = Params::parse(Some("limit=x")).unwrap();
        assert!(matches!(params.count("limit"), Err(Bad::Invalid(_))));
        let params = Params::parse(Some("prefx=a")).unwrap();
        assert!(matches!(params.finish(), Err(Bad::Invalid(_))));
        assert_eq!(
            query(Some("owner=w+1&x")).unwrap(),
            vec![("owner".into(), "w 1".into()), ("x".into(), String::new())]
        );
    }
}
