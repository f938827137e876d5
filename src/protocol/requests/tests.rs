//! The requests read as the server reads them, and written as a client writes them.

#![allow(clippy::too_many_lines)] // Tables, one row a case: long by design.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::lock::LogQuery;
use crate::protocol::{list_path, log_path, read_list, read_log};

fn r(name: &str) -> Resource {
    Resource::parse(name).expect("a resource")
}

fn set(names: &[&str]) -> Members {
    Members::new(names.iter().map(|name| r(name)).collect()).expect("members")
}

/// A single resource's acquire body, read as the server reads it: its request and its
/// wait.
fn acquire(body: &str) -> Result<(Request, Duration), Bad> {
    let mut fields = Fields::parse(body.as_bytes())?;
    let read = AcquireRequest::read(Members::one(r("r")), Shape::One, &mut fields)?;
    fields.finish()?;
    let wait = Duration::from_secs(read.wait_seconds.unwrap_or_default());
    Ok((read.request, wait))
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
        (
            r#"{"owner":"w1","ttl_seconds":1e3}"#,
            "ttl_seconds must be a JSON integer, written without a decimal point or an \
             exponent: 1000, not 1000.0 or 1e3",
        ),
        (
            r#"{"owner":"w1","ttl_seconds":100.0}"#,
            "JSON integer, written without a decimal point or an exponent: 100, not 100.0",
        ),
        (
            r#"{"owner":"w1","ttl_seconds":18446744073709551615}"#,
            "ttl_seconds must be a whole number of seconds between 1s and 365 days (1 to \
             31536000), got 18446744073709551615",
        ),
        (r#"{"owner":"w1","ttl_seconds":true}"#, "JSON integer"),
        (r#"{"ttl_seconds":30}"#, "owner is required"),
        (r#"{"owner":"","ttl_seconds":30}"#, "owner"),
        (r#"{"owner":"   ","ttl_seconds":30}"#, "owner"),
        (r#"{"owner":7,"ttl_seconds":30}"#, "must be a string"),
        (r#"{"owner":"w","ttl_seconds":30,"limit":0}"#, "limit"),
        (
            r#"{"owner":"w","ttl_seconds":30,"limit":10001}"#,
            "limit must be a whole number from 1 to 10000, got 10001",
        ),
        (
            r#"{"owner":"w","ttl_seconds":30,"note":"x","note":"y"}"#,
            r#"the key "note" is given twice"#,
        ),
        (
            &format!(
                r#"{{"owner":"w","ttl_seconds":30,"note":"{}"}}"#,
                "n".repeat(1025)
            ),
            "note: the text is 1025 bytes long; the limit is 1024",
        ),
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
    for (body, word) in &refused {
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

/// `request` as a client sends it, read back as the server reads the route and body.
/// Every number of a request body is refused in the same plain words, whatever came: what
/// the field takes (its range, whole numbers, in seconds where it is a time), and the number
/// as the client wrote it — however large, negative or fractional.
#[test]
fn every_numeric_field_says_what_it_takes_whatever_number_came() {
    let ttl = "a whole number of seconds between 1s and 365 days (1 to 31536000)";
    let wait = "a whole number of seconds between 0s and 24 hours (0 to 86400)";
    let limit = "a whole number from 1 to 10000";
    let fence = "a whole number from 1 to 9223372036854775807";
    // (a body with the number as N, the field's name in the detail, what it takes)
    let fields = [
        (r#"{"owner":"w","ttl_seconds":N}"#, "ttl_seconds", ttl),
        (
            r#"{"owner":"w","ttl_seconds":30,"wait_seconds":N}"#,
            "wait_seconds",
            wait,
        ),
        (
            r#"{"owner":"w","ttl_seconds":30,"limit":N}"#,
            "limit",
            limit,
        ),
        (
            r#"{"owner":"w","ttl_seconds":30,"fence":N}"#,
            "fence",
            fence,
        ),
        (
            r#"{"owner":"w","hold_at_least_seconds":N}"#,
            "hold_at_least_seconds",
            ttl,
        ),
        (
            r#"{"resources":["a","b"],"owner":"w","fences":{"a":1,"b":N}}"#,
            "the fence of b",
            fence,
        ),
    ];
    // (the number as sent, as the detail shows it)
    let numbers = [
        ("1e300", "1e300"),
        ("-1e300", "-1e300"),
        ("18446744073709551616", "1.8446744073709552e19"),
        ("99999999999999999999999", "1e23"),
        ("9223372036854775808", "9223372036854775808"),
        ("18446744073709551615", "18446744073709551615"),
        ("-9223372036854775808", "-9223372036854775808"),
        ("-1", "-1"),
        ("1.5", "1.5"),
        ("-0.5", "-0.5"),
        ("31536001", "31536001"),
        ("1e16", "1e16"),
    ];
    for (body, name, takes) in fields {
        for (number, shown) in numbers {
            let body = body.replace('N', number);
            let read = |body: &str| -> Result<(), Bad> {
                let mut fields = Fields::parse(body.as_bytes())?;
                if body.contains("resources") {
                    let members = fields.members()?;
                    ReleaseRequest::read_set(members, &mut fields)?;
                } else if body.contains("hold_at_least_seconds") {
                    ReleaseRequest::read_one(r("r"), None, &mut fields)?;
                } else if name == "fence" {
                    RenewRequest::read(Members::one(r("r")), Shape::One, &mut fields)?;
                } else {
                    AcquireRequest::read(Members::one(r("r")), Shape::One, &mut fields)?;
                }
                fields.finish()
            };
            let detail = format!("{name} must be {takes}, got {shown}");
            match read(&body) {
                // The one number of the list that one of the fields takes: a fence.
                Ok(()) => assert!(
                    name.contains("fence") && number == "31536001",
                    "{body}: taken"
                ),
                Err(Bad::Invalid(why)) => assert_eq!(why, detail, "{body}"),
                Err(other) => panic!("{body}: {other:?}"),
            }
        }
    }
}

fn sent<T: serde::Serialize>(request: &T) -> (Fields, Value) {
    let bytes = serde_json::to_vec(request).expect("a body");
    let value = serde_json::from_slice(&bytes).expect("JSON");
    (
        Fields::parse(&bytes).expect("a body the server reads"),
        value,
    )
}

/// The members and shape the server reads from `route` and the body's `fields`.
fn addressed(route: &Route, fields: &mut Fields) -> (Members, Shape) {
    let target = match route {
        Route::Acquire(target)
        | Route::Renew(target)
        | Route::Release(target)
        | Route::Leave(target) => target.clone(),
        other => panic!("not a lock operation's route: {other:?}"),
    };
    match target {
        Target::One(resource) => (Members::one(resource), Shape::One),
        Target::Set => (fields.members().expect("resources"), Shape::Set),
    }
}

#[test]
fn what_a_client_sends_the_server_reads_back_the_same_for_one_resource_and_a_set() {
    let owner = Owner::parse("w").expect("an owner");
    let ttl = Ttl::from_secs(30).expect("a ttl");
    for members in [set(&["deploy/prod"]), set(&["b", "a", "c"])] {
        let shape = members.shape();
        let fences = Some(
            (1..=members.as_slice().len())
                .map(|f| Fence(f as i64 + 6))
                .collect(),
        );
        let acquire = AcquireRequest {
            members: members.clone(),
            shape,
            request: Request {
                mode: Mode::Semaphore(3),
                note: Some(Remark::parse("deploy v1").expect("a note")),
                guarded: true,
                ..Request::exclusive(owner.clone(), ttl)
            },
            wait_seconds: Some(12),
        };
        let (mut fields, _) = sent(&acquire);
        let (got, got_shape) = addressed(&acquire.route(), &mut fields);
        let read = AcquireRequest::read(got, got_shape, &mut fields).expect("read");
        fields.finish().expect("no field left");
        assert_eq!(read, acquire);

        let renew = RenewRequest {
            members: members.clone(),
            shape,
            owner: owner.clone(),
            ttl,
            fences: fences.clone(),
        };
        let (mut fields, _) = sent(&renew);
        let (got, got_shape) = addressed(&renew.route(), &mut fields);
        let read = RenewRequest::read(got, got_shape, &mut fields).expect("read");
        fields.finish().expect("no field left");
        assert_eq!(read, renew);

        for end in [
            End::Release,
            End::Finish {
                hold: Some(Duration::from_secs(60)),
            },
        ] {
            let release = ReleaseRequest {
                members: members.clone(),
                shape,
                owner: owner.clone(),
                fences: fences.clone(),
                end,
            };
            let (mut fields, _) = sent(&release);
            let read = match release.route() {
                Route::Release(Target::One(resource)) => {
                    ReleaseRequest::read_one(resource, None, &mut fields)
                }
                route => {
                    let (got, _) = addressed(&route, &mut fields);
                    ReleaseRequest::read_set(got, &mut fields)
                }
            };
            fields.finish().expect("no field left");
            assert_eq!(read.expect("read"), release);
        }

        let leave = LeaveRequest {
            members: members.clone(),
            shape,
            owner: owner.clone(),
        };
        let (mut fields, _) = sent(&leave);
        let (got, got_shape) = addressed(&leave.route(), &mut fields);
        assert_eq!(LeaveRequest::read(got, got_shape, &mut fields), Ok(leave));
    }
    let broken = BreakRequest {
        resource: r("a"),
        reason: Remark::parse("stuck").expect("a reason"),
        owner: Some(owner),
        by: Some(Remark::parse("alice@ops").expect("by")),
    };
    let (mut fields, _) = sent(&broken);
    assert_eq!(BreakRequest::read(r("a"), &mut fields), Ok(broken));
}

#[test]
fn each_request_is_written_as_the_api_names_its_fields() {
    let owner = Owner::parse("w").expect("an owner");
    let ttl = Ttl::from_secs(30).expect("a ttl");
    let one = set(&["a"]);
    let two = set(&["b", "a"]);
    let acquire = |members: &Members, wait| AcquireRequest {
        members: members.clone(),
        shape: members.shape(),
        request: Request::exclusive(owner.clone(), ttl),
        wait_seconds: wait,
    };
    let finish = |members: &Members, hold| ReleaseRequest {
        members: members.clone(),
        shape: members.shape(),
        owner: owner.clone(),
        fences: Some(vec![Fence(3); members.as_slice().len()]),
        end: End::Finish { hold },
    };
    // (what, the route's method and path, the body)
    let cases: Vec<(Route, Value, Value)> = vec![
        (
            acquire(&one, None).route(),
            sent(&acquire(&one, None)).1,
            json!({"owner": "w", "ttl_seconds": 30}),
        ),
        (
            acquire(&two, Some(5)).route(),
            sent(&acquire(&two, Some(5))).1,
            json!({"resources": ["a", "b"], "owner": "w", "ttl_seconds": 30, "wait_seconds": 5}),
        ),
        (
            finish(&one, None).route(),
            sent(&finish(&one, None)).1,
            json!({"owner": "w", "fence": 3}),
        ),
        (
            finish(&one, Some(Duration::from_millis(1500))).route(),
            sent(&finish(&one, Some(Duration::from_millis(1500)))).1,
            json!({"owner": "w", "fence": 3, "hold_at_least_seconds": 2}),
        ),
        (
            finish(&two, None).route(),
            sent(&finish(&two, None)).1,
            json!({"resources": ["a", "b"], "owner": "w", "fences": {"a": 3, "b": 3}, "each": true}),
        ),
    ];
    let routes: Vec<(&str, String)> = cases
        .iter()
        .map(|(route, _, _)| (route.method(), route.path()))
        .collect();
    assert_eq!(
        routes,
        [
            ("POST", "/locks/a".to_owned()),
            ("POST", "/sets".to_owned()),
            ("DELETE", "/locks/a".to_owned()),
            ("DELETE", "/locks/a".to_owned()),
            ("POST", "/sets/release".to_owned()),
        ]
    );
    for (route, got, want) in cases {
        assert_eq!(got, want, "{}", route.name());
    }
}

#[test]
fn list_and_log_queries_are_written_as_the_server_reads_them() {
    assert_eq!(list_path("deploy/"), "/locks?prefix=deploy%2F");
    let prefix = list_path("a b").split_once('?').map(|(_, q)| q.to_owned());
    assert_eq!(read_list(prefix.as_deref()), Ok("a b".to_owned()));
    let query = LogQuery {
        resource: Some(r("deploy/prod")),
        prefix: Some("deploy/".into()),
        since: Some(Duration::from_millis(90_500)),
        limit: Some(7),
    };
    let path = log_path(&query);
    assert_eq!(
        path,
        "/log?resource=deploy%2Fprod&prefix=deploy%2F&since=90500ms&limit=7"
    );
    assert_eq!(read_log(path.split_once('?').map(|(_, q)| q)), Ok(query));
    assert_eq!(log_path(&LogQuery::default()), "/log");
}

#[test]
fn a_grant_header_names_each_tenure_in_the_members_order() {
    let tenures = [Grant::New, Grant::Extended, Grant::New];
    assert_eq!(grant_header(&tenures), "new,extended,new");
    assert_eq!(read_grant_header(Some("new,extended,new"), 3), tenures);
    assert_eq!(read_grant_header(Some(" extended"), 1), [Grant::Extended]);
    // Nothing said, or less than asked: a new tenure.
    assert_eq!(read_grant_header(None, 2), [Grant::New, Grant::New]);
    assert_eq!(
        read_grant_header(Some("extended"), 2),
        [Grant::Extended, Grant::New]
    );
}

#[test]
fn durations_are_whole_seconds_rounded_up() {
    for (ms, secs) in [(0, 0), (1, 1), (999, 1), (1000, 1), (1001, 2), (30_000, 30)] {
        assert_eq!(whole_seconds(Duration::from_millis(ms)), secs, "{ms} ms");
    }
}
