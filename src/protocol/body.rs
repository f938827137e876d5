//! A request's JSON body, read strictly: [`Fields`] takes its fields one by one, each checked as
//! the command line checks its flag (the same parsers), and [`Fields::finish`] refuses one left
//! unread (an unknown field). A JSON value must already have the field's type: `"3600"` or
//! `60.5` is no TTL (docs/src/reference/validation.md, the TTL rule). What is wrong becomes a [`Bad`],
//! which the server answers with 400 (unreadable JSON) or 422 (a readable request that breaks a
//! rule), its detail pinned word for word (docs/src/reference/server.md, "Bad input").
//!
//! Nothing is taken twice: a JSON object that gives a key twice, at any depth, is refused naming
//! the key, rather than the last one silently winning ([`Strict`]). The fields of one request
//! are read in a fixed order (see [`super::requests`]), so that a body with two faults is always
//! answered about the same one.

use std::cell::RefCell;
use std::fmt;
use std::time::Duration;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::MAX_WAIT_SECS;
use crate::lock::{Fence, MAX_LIMIT, MAX_TTL_SECS, Members, Mode, Owner, Remark, Resource, Ttl};

/// Why a request cannot be carried out as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bad {
    /// The body is not JSON, or not a JSON object (400).
    Malformed(String),
    /// A field or parameter breaks a rule (422).
    Invalid(String),
    /// The path or the query is not percent-encoded as RFC 3986 says: a `%` not followed by
    /// two hexadecimal digits (400).
    Encoding(String),
}

/// A JSON body's fields, taken one by one; [`Fields::finish`] refuses any left unread.
pub struct Fields(Map<String, Value>);

impl Fields {
    /// The fields of `body`: a JSON object, or nothing at all (an empty body, for a request
    /// whose fields are all optional or given in the query).
    ///
    /// # Errors
    ///
    /// [`Bad::Malformed`] for a body that is not a JSON object; [`Bad::Invalid`] for one
    /// that gives a key twice (in any of its objects), naming the key.
    pub fn parse(body: &[u8]) -> Result<Fields, Bad> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Fields(Map::new()));
        }
        let twice = RefCell::new(None);
        let mut reader = serde_json::Deserializer::from_slice(body);
        let read = Strict {
            within: None,
            twice: &twice,
        }
        .deserialize(&mut reader)
        .and_then(|value| reader.end().map(|()| value));
        match read {
            Err(err) => Err(Bad::Malformed(format!("the body is not valid JSON: {err}"))),
            Ok(_) if twice.borrow().is_some() => {
                Err(Bad::Invalid(twice.into_inner().unwrap_or_default()))
            }
            Ok(Value::Object(map)) => Ok(Fields(map)),
            Ok(_) => Err(Bad::Malformed("the body must be a JSON object".into())),
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

    /// A whole number that `whole` takes, as a JSON integer (not a string, not a fraction).
    fn optional_whole(&mut self, name: &str, whole: Whole) -> Result<Option<i64>, Bad> {
        match self.take(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(number)) => whole.read(name, &number).map(Some),
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

    pub(super) fn owner(&mut self) -> Result<Owner, Bad> {
        let raw = self.string("owner")?;
        Owner::parse(&raw).map_err(Bad::Invalid)
    }

    /// `owner`, when the request may name one (`break`).
    pub(super) fn optional_owner(&mut self) -> Result<Option<Owner>, Bad> {
        self.optional_string("owner")?
            .map(|raw| Owner::parse(&raw).map_err(Bad::Invalid))
            .transpose()
    }

    /// `owner` from the body or from the query (`?owner=`), as `DELETE` takes it: given in
    /// both, the two must name the same owner.
    pub(super) fn owner_or(&mut self, query: Option<&str>) -> Result<Owner, Bad> {
        let Some(raw) = query else {
            return self.owner();
        };
        let queried = Owner::parse(raw).map_err(Bad::Invalid)?;
        if !self.0.contains_key("owner") {
            return Ok(queried);
        }
        let given = self.owner()?;
        if given != queried {
            return Err(Bad::Invalid(format!(
                "owner is given twice, differently: {:?} in the query and {:?} in the body; \
                 give it once",
                queried.as_str(),
                given.as_str()
            )));
        }
        Ok(given)
    }

    pub(super) fn ttl(&mut self) -> Result<Ttl, Bad> {
        let Some(secs) = self.optional_whole("ttl_seconds", Whole::TTL)? else {
            return Err(Bad::Invalid("ttl_seconds is required".into()));
        };
        u64::try_from(secs)
            .map_err(|_| format!("ttl must be between 1s and 365 days, got {secs}s"))
            .and_then(Ttl::from_secs)
            .map_err(Bad::Invalid)
    }

    pub(super) fn fence(&mut self) -> Result<Option<Fence>, Bad> {
        match self.take("fence") {
            None | Some(Value::Null) => Ok(None),
            Some(value) => fence_of("fence", &value).map(Some),
        }
    }

    /// A whole number of seconds that `whole` takes.
    pub(super) fn seconds(&mut self, name: &str, whole: Whole) -> Result<Option<Duration>, Bad> {
        Ok(self
            .optional_whole(name, whole)?
            .map(|secs| Duration::from_secs(secs.unsigned_abs())))
    }

    /// `shared` and `limit`, as `--shared` and `--limit N`.
    pub(super) fn mode(&mut self) -> Result<Mode, Bad> {
        let shared = self.optional_bool("shared")?.unwrap_or(false);
        let limit = self.optional_whole("limit", Whole::LIMIT)?;
        match (shared, limit) {
            (true, Some(_)) => Err(Bad::Invalid(
                "shared and limit cannot be used together".into(),
            )),
            (true, None) => Ok(Mode::Shared),
            (false, None) => Ok(Mode::Exclusive),
            (false, Some(n)) => Mode::parse_limit(&n.to_string()).map_err(|_| {
                Bad::Invalid(format!(
                    "limit must be a whole number from 1 to {MAX_LIMIT}, got {n}"
                ))
            }),
        }
    }

    /// A flag: `true` or `false`; absent, `false`.
    pub(super) fn flag(&mut self, name: &str) -> Result<bool, Bad> {
        Ok(self.optional_bool(name)?.unwrap_or(false))
    }

    /// A note, reason or name of who breaks a lock, as `--note`, `--reason`, `--by`.
    pub(super) fn remark(&mut self, name: &str) -> Result<Option<Remark>, Bad> {
        self.optional_string(name)?
            .map(|text| Remark::parse(&text).map_err(|why| Bad::Invalid(format!("{name}: {why}"))))
            .transpose()
    }

    /// `resources` of a lock set's request: an array of resource names, each checked as a
    /// path segment's decoded name is; repeats collapse, and 1 to [`crate::lock::MAX_MEMBERS`]
    /// remain.
    ///
    /// # Errors
    ///
    /// [`Bad::Invalid`] naming what is wrong: no `resources`, not an array of names, an
    /// invalid name, none at all or too many.
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
    pub(super) fn fences(&mut self, members: &Members) -> Result<Option<Vec<Fence>>, Bad> {
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

/// A JSON value, read as `serde_json::Value` is but noting the first key that an object
/// gives twice (where `Value` keeps the last silently), so that such a body can be refused.
struct Strict<'a> {
    /// The key of the object member being read, when it is one, to name where a repeat is.
    within: Option<String>,
    /// The first repeat found: what to answer.
    twice: &'a RefCell<Option<String>>,
}

impl Strict<'_> {
    fn inner(&self, within: Option<String>) -> Strict<'_> {
        Strict {
            within,
            twice: self.twice,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, reader: D) -> Result<Value, D::Error> {
        reader.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, reader: D) -> Result<Value, D::Error> {
        self.deserialize(reader)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let mut read = Vec::new();
        while let Some(item) = items.next_element_seed(self.inner(self.within.clone()))? {
            read.push(item);
        }
        Ok(Value::Array(read))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Value, A::Error> {
        let mut read = Map::new();
        while let Some(key) = members.next_key::<String>()? {
            let value = members.next_value_seed(self.inner(Some(key.clone())))?;
            if read.contains_key(&key) {
                let mut twice = self.twice.borrow_mut();
                if twice.is_none() {
                    *twice = Some(match &self.within {
                        None => format!("the key {key:?} is given twice; give each key once"),
                        Some(outer) => {
                            format!("{outer}: the key {key:?} is given twice; give each key once")
                        }
                    });
                }
            } else {
                read.insert(key, value);
            }
        }
        Ok(Value::Object(read))
    }
}

/// What a field of whole numbers takes — from `least` to `most`, in seconds when `span` names
/// the most as a time — and the words of its refusals: each says what is taken, as the command
/// line's flag says it (`between 1s and 365 days`, `from 1 to 10000`), whatever number came,
/// however large, negative or fractional.
#[derive(Debug, Clone, Copy)]
pub(super) struct Whole {
    least: i64,
    most: i64,
    span: Option<&'static str>,
}

// The bounds fit in an i64 by far; `From` is not yet usable in a constant.
#[allow(clippy::cast_possible_wrap, clippy::cast_lossless)]
impl Whole {
    /// `ttl_seconds` and `hold_at_least_seconds`, as `--ttl` and `--hold-at-least`.
    pub(super) const TTL: Whole = Whole {
        least: 1,
        most: MAX_TTL_SECS as i64,
        span: Some("365 days"),
    };
    /// `wait_seconds`: a day at most.
    pub(super) const WAIT: Whole = Whole {
        least: 0,
        most: MAX_WAIT_SECS as i64,
        span: Some("24 hours"),
    };
    /// `limit`, as `--limit`.
    const LIMIT: Whole = Whole {
        least: 1,
        most: MAX_LIMIT as i64,
        span: None,
    };
    /// A fence: from 1 (the first a store hands out) up.
    const FENCE: Whole = Whole {
        least: 1,
        most: i64::MAX,
        span: None,
    };
}

impl Whole {
    /// What the field takes, in words.
    fn words(self) -> String {
        let Whole { least, most, span } = self;
        match span {
            Some(span) => {
                format!("a whole number of seconds between {least}s and {span} ({least} to {most})")
            }
            None => format!("a whole number from {least} to {most}"),
        }
    }

    /// `number`, given as `name`, if it is one this field takes. A number with a fraction or
    /// an exponent that is whole and in range (`100.0`, `1e2`: JSON reads both as fractions)
    /// is refused saying how to write it; any other is refused saying what is taken, showing
    /// the number as the client wrote it, or in its exponent form when it is past any
    /// integer (`1e300`).
    fn read(self, name: &str, number: &Number) -> Result<i64, Bad> {
        if let Some(n) = number
            .as_i64()
            .filter(|n| (self.least..=self.most).contains(n))
        {
            return Ok(n);
        }
        #[allow(clippy::cast_precision_loss)] // Bounds compared as floats: close enough.
        let (least, most) = (self.least as f64, self.most as f64);
        let shown = match number.as_f64() {
            Some(value) if number.is_f64() && value.fract() == 0.0 => {
                if (least..=most).contains(&value) && value.abs() < 1e15 {
                    return Err(Bad::Invalid(format!(
                        "{name} must be a JSON integer, written without a decimal point or an \
                         exponent: {value:.0}, not {value:.1} or {value:e}"
                    )));
                }
                if value.abs() < 1e16 {
                    format!("{value:.0}")
                } else {
                    format!("{value:e}")
                }
            }
            _ => number.to_string(),
        };
        Err(Bad::Invalid(format!(
            "{name} must be {}, got {shown}",
            self.words()
        )))
    }
}

/// A fence as a request gives it: a JSON integer from 1 up (fences start at 1), `what`
/// naming it in the refusal.
fn fence_of(what: &str, value: &Value) -> Result<Fence, Bad> {
    match value {
        Value::Number(number) => Whole::FENCE.read(what, number).map(Fence),
        other => Err(Bad::Invalid(format!(
            "{what} must be a JSON integer, got {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn a_key_given_twice_is_refused_at_any_depth_naming_it_and_bad_json_stays_400() {
        // (body, the 422's detail)
        let cases = [
            (
                r#"{"owner":"a","owner":"b","ttl_seconds":30}"#,
                r#"the key "owner" is given twice; give each key once"#,
            ),
            (
                r#"{"owner":"a","ttl_seconds":30,"owner":"a"}"#,
                r#"the key "owner" is given twice"#,
            ),
            (
                r#"{"resources":["a"],"fences":{"a":1,"a":2}}"#,
                r#"fences: the key "a" is given twice"#,
            ),
            (
                r#"{"x":[{"y":1,"y":1}],"z":{"w":{"v":1,"v":2}}}"#,
                r#"x: the key "y" is given twice"#,
            ),
        ];
        for (body, detail) in cases {
            match Fields::parse(body.as_bytes()) {
                Err(Bad::Invalid(why)) => assert!(why.starts_with(detail), "{body}: {why}"),
                Err(other) => panic!("{body}: {other:?}"),
                Ok(_) => panic!("{body}: taken"),
            }
        }
        // JSON that is not JSON is still 400, repeats or not; the same key in two objects is
        // no repeat.
        for body in [r#"{"owner":"a","owner":"b""#, r#"{"a":1,"a":2} x"#] {
            assert!(
                matches!(Fields::parse(body.as_bytes()), Err(Bad::Malformed(_))),
                "{body}"
            );
        }
        let mut fields =
            Fields::parse(br#"{"resources":["a","b"],"fences":{"a":1,"b":2},"owner":"w"}"#)
                .unwrap();
        let members = fields.members().unwrap();
        assert_eq!(
            fields
                .fences(&members)
                .unwrap()
                .map(|f| f.iter().map(|f| f.0).collect::<Vec<_>>()),
            Some(vec![1, 2])
        );
        // Numbers are read as serde_json reads them.
        let fields = Fields::parse(br#"{"a":-1,"b":18446744073709551615,"c":1.5,"d":null}"#)
            .unwrap()
            .0;
        assert_eq!(
            Value::Object(fields),
            json!({"a": -1, "b": 18_446_744_073_709_551_615_u64, "c": 1.5, "d": null})
        );
    }

    #[test]
    fn an_owner_in_the_query_and_the_body_must_be_the_same() {
        let owner = |body: &str, query: Option<&str>| {
            let mut fields = Fields::parse(body.as_bytes())?;
            fields
                .owner_or(query)
                .map(|owner| owner.as_str().to_owned())
        };
        assert_eq!(owner(r#"{"owner":"w1"}"#, None), Ok("w1".into()));
        assert_eq!(owner("", Some("w1")), Ok("w1".into()));
        assert_eq!(owner(r#"{"owner":"w1"}"#, Some("w1")), Ok("w1".into()));
        assert_eq!(owner(r#"{"owner":" w1"}"#, Some("w1 ")), Ok("w1".into()));
        assert_eq!(
            owner(r#"{"owner":"w1"}"#, Some("zz")),
            Err(Bad::Invalid(
                r#"owner is given twice, differently: "zz" in the query and "w1" in the body; give it once"#
                    .into()
            ))
        );
        assert!(matches!(owner("{}", None), Err(Bad::Invalid(_))));
        assert!(matches!(
            owner(r#"{"owner":""}"#, Some("w1")),
            Err(Bad::Invalid(_))
        ));
    }
}
