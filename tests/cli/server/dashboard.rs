//! The dashboard (`GET /ui/`): a real `distlock serve` over SQLite and over PostgreSQL, the
//! CLI changing the store beside it, and a real headless Chromium showing it
//! ([`crate::common::browser`]); and its HTTP answers, read by a real client. Every wait is
//! for a condition of the page, never a fixed sleep. Screenshots of each view are saved under
//! `target/dashboard-screenshots/` (the book's copies are in `docs/src/hosts/dashboard/`).

use serde_json::{Value, json};

use super::tokens::{call, make_token};
use crate::common::browser::{Browser, Look};
use crate::common::server::Server;
use crate::common::store::{Db, Kind, every_store, until_waiting};

/// A resource name, an owner and a note that would run script if they were read as HTML.
const HOSTILE: &str = "<img src=x onerror=window.__pwned=1>";
const HOSTILE_OWNER: &str = "<b onmouseover=window.__pwned=2>w</b>";
const HOSTILE_WAITER: &str = "<i onclick=window.__pwned=5>x</i>";
const HOSTILE_NOTE: &str = "<script>window.__pwned=3</script><img src=x onerror=window.__pwned=4>";

/// `text` as a JavaScript string literal.
fn js(text: &str) -> String {
    serde_json::to_string(text).expect("a string")
}

/// Opens the dashboard's `view` and waits until it has shown the server's answer once.
fn open(browser: &Browser, server: &Server, view: &str) {
    browser.goto(&server.url(&format!("/ui/#{view}")));
    shown(browser, view);
}

/// Waits until `view` has been refreshed from the server (after a change of view, say).
fn shown(browser: &Browser, view: &str) {
    browser.wait_until(
        &format!("the {view} view"),
        &format!("return document.body.dataset.ready === {};", js(view)),
    );
}

/// The resources of the rows of the locks view, in their order, joined by `|`.
const ROWS: &str =
    "[...document.querySelectorAll('#locks-rows tr')].map(r => r.dataset.resource).join('|')";

/// The condition that the locks view shows exactly `resources`, in this order.
fn rows_are(resources: &[&str]) -> String {
    format!("return {ROWS} === {};", js(&resources.join("|")))
}

#[test]
fn locks_taken_and_released_by_the_cli_appear_and_disappear_without_a_reload() {
    let Some(browser) = Browser::start("the dashboard's locks view", Look::Desktop) else {
        return;
    };
    for db in every_store() {
        let server = Server::start(&db);
        open(&browser, &server, "locks");
        browser.wait_until("no lock yet", &rows_are(&[]));
        browser.eval("window.__samePage = true; return null;");
        db.json(
            &[
                "acquire",
                "deploy/prod",
                "--owner",
                "ci-7",
                "--ttl",
                "300",
                "--note",
                "release 1.4",
            ],
            0,
        );
        for owner in ["s1", "s2"] {
            db.json(
                &[
                    "acquire", "slots", "--limit", "3", "--owner", owner, "--ttl", "300",
                ],
                0,
            );
        }
        db.json(
            &[
                "acquire", "cache", "--shared", "--owner", "r1", "--ttl", "300",
            ],
            0,
        );
        let all = ["cache", "deploy/prod", "slots", "slots"];
        browser.wait_until("the four tenures", &rows_are(&all));
        let cells = browser.eval(
            "return [...document.querySelectorAll('#locks-rows tr')]
                 .map(r => [...r.cells].map(c => c.textContent));",
        );
        let row = |i: usize| -> Vec<&str> {
            cells[i]
                .as_array()
                .expect("cells")
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect()
        };
        assert_eq!(row(0)[..3], ["cache", "shared (1 held)", "r1"], "{cells}");
        assert_eq!(
            row(1)[..5],
            ["deploy/prod", "exclusive", "ci-7", "", "release 1.4"]
        );
        assert_eq!(row(2)[1], "limit 3 (2 held)", "{cells}");
        assert!(
            row(1)[6].ends_with('s') && row(1)[7].starts_with('4'),
            "age, left: {cells}"
        );
        // Filtered by prefix, then sorted by age (oldest first), as a user picks them.
        browser.type_into("#locks-prefix", "s");
        browser.wait_until("only the slots", &rows_are(&["slots", "slots"]));
        browser.eval(
            "const p = document.getElementById('locks-prefix'); p.value = '';
             p.dispatchEvent(new Event('input')); return null;",
        );
        browser.eval(
            "const s = document.getElementById('locks-sort'); s.value = 'age';
             s.dispatchEvent(new Event('change')); return null;",
        );
        browser.wait_until(
            "oldest first",
            &rows_are(&["deploy/prod", "slots", "slots", "cache"]),
        );
        if db.kind == Kind::Sqlite {
            browser.screenshot("locks");
        }
        db.json(&["release", "deploy/prod", "--owner", "ci-7"], 0);
        browser.wait_until("deploy/prod gone", &rows_are(&["slots", "slots", "cache"]));
        db.json(&["release", "cache", "--owner", "r1"], 0);
        browser.wait_until("cache gone", &rows_are(&["slots", "slots"]));
        assert_eq!(
            browser.eval("return window.__samePage === true;"),
            true,
            "no reload"
        );
    }
}

#[test]
fn a_waiter_appears_in_its_queue_in_order_and_a_set_waiter_names_its_members() {
    let Some(browser) = Browser::start("the dashboard's queues view", Look::Desktop) else {
        return;
    };
    for db in every_store() {
        let server = Server::start(&db);
        open(&browser, &server, "queues");
        db.json(
            &[
                "acquire",
                "deploy/prod",
                "--owner",
                "holder",
                "--ttl",
                "300",
            ],
            0,
        );
        db.json(
            &["acquire", "deploy/db", "--owner", "holder", "--ttl", "300"],
            0,
        );
        let wait = ["--ttl", "60", "--wait", "120s"];
        let mut waiters = Vec::new();
        // (owner, resources, its mode's flags): each queued before the next comes.
        let arrivals: [(&str, &[&str], &[&str]); 3] = [
            ("w1", &["deploy/prod"], &[]),
            ("w2", &["deploy/prod"], &["--shared"]),
            ("w3", &["deploy/db", "deploy/prod"], &[]),
        ];
        for (n, (owner, resources, mode)) in arrivals.iter().enumerate() {
            let mut args = vec!["acquire"];
            args.extend_from_slice(resources);
            args.extend(["--owner", owner]);
            args.extend_from_slice(&wait);
            args.extend_from_slice(mode);
            waiters.push(db.spawn(&args, owner));
            until_waiting(&db, "deploy/prod", n as u64 + 1);
        }
        let queue = |resource: &str| {
            format!(
                "[...document.querySelectorAll('#queues-list .queue')]
                    .filter(q => q.dataset.resource === {})
                    .flatMap(q => [...q.querySelectorAll('li')])",
                js(resource)
            )
        };
        browser.wait_until(
            "w1, w2 and w3 in order on deploy/prod",
            &format!(
                "return {}.map(w => w.dataset.owner).join() === 'w1,w2,w3';",
                queue("deploy/prod")
            ),
        );
        browser.wait_until(
            "w3 on deploy/db",
            &format!(
                "return {}.map(w => w.dataset.owner).join() === 'w3';",
                queue("deploy/db")
            ),
        );
        let shown = browser.eval(&format!(
            "return {}.map(w => [w.querySelector('.waited').textContent,
                [...w.querySelectorAll('.member')].map(m => m.textContent).join()]);",
            queue("deploy/prod")
        ));
        let facts = |i: usize| shown[i][0].as_str().expect("facts").to_owned();
        assert!(facts(0).starts_with("exclusive · waiting "), "{shown}");
        assert!(facts(1).starts_with("shared · waiting "), "{shown}");
        assert_eq!(shown[0][1], "", "one resource names no members: {shown}");
        assert_eq!(shown[2][1], "deploy/db,deploy/prod", "{shown}");
        if db.kind == Kind::Sqlite {
            browser.screenshot("queues");
        }
        drop(waiters);
    }
}

#[test]
fn the_timeline_shows_a_break_with_who_and_why_and_a_kept_hold() {
    let Some(browser) = Browser::start("the dashboard's timeline", Look::Desktop) else {
        return;
    };
    for db in every_store() {
        let server = Server::start(&db);
        let take = |resource: &str, owner: &str| {
            db.json(&["acquire", resource, "--owner", owner, "--ttl", "300"], 0);
        };
        take("deploy/prod", "w1");
        db.json(
            &[
                "break",
                "deploy/prod",
                "--reason",
                "stuck deploy",
                "--by",
                "alice@ops",
            ],
            0,
        );
        take("deploy/prod", "w2");
        db.json(&["release", "deploy/prod", "--owner", "w2"], 0);
        take("deploy/db", "w3");
        let kept = db.run(&[
            "run",
            "--resource",
            "backup",
            "--owner",
            "cron",
            "--ttl",
            "60",
            "--hold-at-least",
            "10m",
            "--",
            "true",
        ]);
        assert!(kept.status.success(), "{kept:?}");
        open(&browser, &server, "timeline");
        browser.wait_until(
            "the break, with who and why, in the list and on the chart",
            "const item = [...document.querySelectorAll('#timeline-breaks li')][0];
             const label = [...document.querySelectorAll('svg text.break-label')][0];
             return !!item && item.querySelector('q').textContent === 'stuck deploy'
                 && item.textContent.includes('alice@ops')
                 && !!label
                 && label.textContent === '✕ \\u2068alice@ops\\u2069: \\u2068stuck deploy\\u2069';",
        );
        browser.wait_until(
            "the hold kept, hatched, on backup's live tenure",
            "return !!document.querySelector('g.tenure.live[data-resource=\"backup\"] rect.kept');",
        );
        let bars = browser.eval(
            "return [...document.querySelectorAll('g.tenure')].map(g =>
                 g.dataset.resource + ' ' + g.getAttribute('class'));",
        );
        let bars: Vec<&str> = bars
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_str().unwrap())
            .collect();
        for bar in [
            "deploy/db tenure live",
            "deploy/prod tenure broken",
            "deploy/prod tenure released",
            "backup tenure live",
        ] {
            assert!(bars.contains(&bar), "{bar} in {bars:?}");
        }
        if db.kind == Kind::Sqlite {
            browser.screenshot("timeline");
        }
        // One resource named exactly.
        browser.eval("document.getElementById('timeline-kind').value = 'resource'; return null;");
        browser.type_into("#timeline-target", "deploy/db");
        browser.wait_until(
            "only deploy/db",
            "const all = [...document.querySelectorAll('g.tenure')];
             return all.length === 1 && all[0].dataset.resource === 'deploy/db';",
        );
    }
}

#[test]
fn hostile_names_owners_notes_and_reasons_are_shown_as_text_and_no_script_runs() {
    let Some(browser) = Browser::start("the dashboard against hostile names", Look::Desktop) else {
        return;
    };
    for db in every_store() {
        let server = Server::start(&db);
        db.json(
            &[
                "acquire",
                HOSTILE,
                "--owner",
                HOSTILE_OWNER,
                "--ttl",
                "300",
                "--note",
                HOSTILE_NOTE,
            ],
            0,
        );
        let waiter = db.spawn(
            &[
                "acquire",
                HOSTILE,
                "--owner",
                HOSTILE_WAITER,
                "--ttl",
                "60",
                "--wait",
                "120s",
            ],
            "waiter",
        );
        until_waiting(&db, HOSTILE, 1);
        db.json(&["acquire", "x", "--owner", "w", "--ttl", "300"], 0);
        db.json(
            &["break", "x", "--reason", HOSTILE_NOTE, "--by", HOSTILE],
            0,
        );
        open(&browser, &server, "locks");
        browser.wait_until(
            "the hostile row, as text",
            &format!(
                "const r = document.querySelector('#locks-rows tr');
                 return !!r && r.cells[0].textContent === {} && r.cells[2].textContent === {}
                     && r.cells[4].textContent === {};",
                js(HOSTILE),
                js(HOSTILE_OWNER),
                js(HOSTILE_NOTE)
            ),
        );
        browser.goto(&server.url("/ui/#queues"));
        shown(&browser, "queues");
        browser.wait_until(
            "the hostile queue, as text",
            &format!(
                "const q = document.querySelector('#queues-list .queue');
                 return !!q && q.querySelector('h3').textContent === {}
                     && q.querySelector('.owner').textContent === {}
                     && getComputedStyle(q.querySelector('.owner')).unicodeBidi === 'isolate';",
                js(HOSTILE),
                js(HOSTILE_WAITER)
            ),
        );
        browser.goto(&server.url("/ui/#timeline"));
        shown(&browser, "timeline");
        browser.wait_until(
            "the hostile break, as text",
            &format!(
                "const q = document.querySelector('#timeline-breaks q');
                 const names = [...document.querySelectorAll('svg text.lane-label')]
                     .map(t => t.firstChild.nodeValue);
                 return !!q && q.textContent === {} && names.includes({})
                     && getComputedStyle(q).unicodeBidi === 'isolate';",
                js(HOSTILE_NOTE),
                js(HOSTILE)
            ),
        );
        let found = browser.eval(
            "return [window.__pwned === undefined, document.querySelectorAll('img').length,
                     document.querySelectorAll('script').length,
                     document.querySelectorAll('b, i, [onerror], [onmouseover], [onclick]').length];",
        );
        assert_eq!(
            found,
            json!([true, 0, 1, 0]),
            "no script ran, no element was made"
        );
        drop(waiter);
    }
}

#[test]
fn with_tokens_the_page_asks_for_one_shows_only_its_scope_and_a_wrong_token_sees_nothing() {
    let Some(browser) = Browser::start("the dashboard with tokens", Look::Desktop) else {
        return;
    };
    for db in every_store() {
        let secret = make_token(&db, "deploy", &["--prefix", "deploy/"]);
        let tokens = db.file("tokens.json");
        let server = Server::start_serving(&db, &["--tokens", tokens.to_str().unwrap()]);
        db.json(&["acquire", "deploy/a", "--owner", "d1", "--ttl", "300"], 0);
        db.json(&["acquire", "other/b", "--owner", "o1", "--ttl", "300"], 0);
        let waiter = db.spawn(
            &[
                "acquire", "other/b", "--owner", "o2", "--ttl", "60", "--wait", "120s",
            ],
            "waiter",
        );
        until_waiting(&db, "other/b", 1);
        browser.goto(&server.url("/ui/#locks"));
        let asked = "return !document.getElementById('login').hidden
                         && document.getElementById('views').hidden;";
        browser.wait_until("the page asking for a token", asked);
        if db.kind == Kind::Sqlite {
            browser.screenshot("token");
        }
        browser.type_into("#token", &secret);
        browser.click("#login button[type=submit]");
        shown(&browser, "locks");
        browser.wait_until("deploy/a only", &rows_are(&["deploy/a"]));
        browser.goto(&server.url("/ui/#queues"));
        shown(&browser, "queues");
        let queues =
            browser.eval("return document.querySelectorAll('#queues-list .queue').length;");
        assert_eq!(queues, 0, "other/b's queue is not the token's to read");
        let kept = browser.eval(&format!(
            "const secret = {};
             return [sessionStorage.getItem('distlock-token') === secret, document.cookie,
                     location.href.includes(secret),
                     performance.getEntriesByType('resource').some(e => e.name.includes(secret))];",
            js(&secret)
        ));
        assert_eq!(
            kept,
            json!([true, "", false, false]),
            "in sessionStorage, nowhere else"
        );
        // The token the tab keeps is no longer known: what was shown is taken away.
        browser.goto(&server.url("/ui/#locks"));
        browser.wait_until("deploy/a", &rows_are(&["deploy/a"]));
        browser.eval(&format!(
            "sessionStorage.setItem('distlock-token', {}); return null;",
            js(&format!("dl_{}", "0".repeat(64)))
        ));
        browser.wait_until(
            "the page saying the token is refused, showing nothing",
            &format!(
                "{} && document.getElementById('login-why').textContent.includes('does not know')
                 && document.querySelectorAll('#locks-rows tr').length === 0;",
                asked.trim_end_matches(';')
            ),
        );
        drop(waiter);
    }
}

#[test]
fn health_names_the_store_by_its_kind_only_and_the_page_fits_a_phone_in_the_dark() {
    let Some(browser) = Browser::start("the dashboard on a phone, dark", Look::DarkPhone) else {
        return;
    };
    for db in every_store() {
        let server = Server::start(&db);
        db.json(
            &[
                "acquire",
                "deploy/prod",
                "--owner",
                "ci-7",
                "--ttl",
                "300",
                "--note",
                "v1.4",
            ],
            0,
        );
        open(&browser, &server, "health");
        let kind = match db.kind {
            Kind::Sqlite => "SQLite",
            Kind::Postgres => "PostgreSQL",
        };
        browser.wait_until(
            "the store's kind and a rate of the dashboard's own reads",
            &format!(
                "const facts = document.getElementById('health-facts').textContent;
                 const routes = [...document.querySelectorAll('#health-rows tr')]
                     .map(r => r.cells[0].textContent);
                 return facts.includes({}) && facts.includes('Live tenures1')
                     && routes.includes('GET /metrics');",
                js(&format!("Store{kind}"))
            ),
        );
        let text = browser.eval("return document.documentElement.outerHTML;");
        let text = text.as_str().expect("the page");
        assert!(
            !text.contains(db.store_url()),
            "the store's path or URL is not shown"
        );
        if db.kind == Kind::Postgres {
            let url = db.store_url();
            let secret = url
                .split('@')
                .next()
                .and_then(|s| s.rsplit(':').next())
                .unwrap();
            assert!(!text.contains(&format!(":{secret}@")), "no credentials");
        }
        let fits = browser.eval(
            "const bg = getComputedStyle(document.body).backgroundColor.match(/\\d+/g).map(Number);
             return [matchMedia('(prefers-color-scheme: dark)').matches,
                     bg[0] + bg[1] + bg[2] < 150,
                     matchMedia('(max-width: 640px)').matches,
                     document.documentElement.scrollWidth <= innerWidth];",
        );
        assert_eq!(
            fits,
            json!([true, true, true, true]),
            "dark, on a phone, no overflow"
        );
        if db.kind == Kind::Sqlite {
            browser.screenshot("health-phone-dark");
            browser.goto(&server.url("/ui/#locks"));
            browser.wait_until("deploy/prod", &rows_are(&["deploy/prod"]));
            let card = browser
                .eval("return getComputedStyle(document.querySelector('#locks-rows tr')).display;");
            assert_eq!(card, "block", "each row a card on a phone");
            browser.screenshot("locks-phone-dark");
        }
    }
}

#[test]
fn a_thousand_live_locks_are_shown_from_the_page_and_one_list_call() {
    let Some(browser) = Browser::start("the dashboard with 1,000 locks", Look::Desktop) else {
        return;
    };
    for db in every_store() {
        let server = Server::start(&db);
        // 1,000 tenures, taken 64 at a time as lock sets through the server.
        let names: Vec<String> = (0..1000).map(|n| format!("load/{n:04}")).collect();
        for chunk in names.chunks(64) {
            let body = json!({"resources": chunk, "owner": "load", "ttl_seconds": 600});
            let reply = server.post("/sets", &body);
            assert_eq!(reply.json(200)["acquired"], true, "{}", reply.describe());
        }
        browser.goto(&server.url("/ui/#locks"));
        browser.wait_until(
            "1,000 rows",
            "return document.querySelectorAll('#locks-rows tr').length === 1000;",
        );
        let loaded = browser.eval(
            "const ready = performance.getEntriesByName('distlock-ready')[0];
             const before = performance.getEntriesByType('resource')
                 .filter(e => e.startTime < ready.startTime)
                 .map(e => new URL(e.name).pathname);
             return [before.filter(p => !p.startsWith('/ui/')), before.length,
                     Math.round(ready.startTime)];",
        );
        assert_eq!(
            loaded[0],
            json!(["/locks"]),
            "one list call before the first showing: {loaded}"
        );
        // The page, its style sheet, its icon and its seven modules: nothing else.
        assert!(loaded[1].as_u64().unwrap() <= 10, "{loaded}");
        eprintln!(
            "note: {:?}: 1,000 locks shown {} ms after the page began to load",
            db.kind, loaded[2]
        );
    }
}

/// `GET path` with headers: status, and the headers named.
fn head_of(
    server: &Server,
    path: &str,
    send: &[(&str, &str)],
    names: &[&str],
) -> (u16, Vec<Option<String>>) {
    let agent = crate::common::server::agent(None);
    let mut request = agent.get(server.url(path));
    for (name, value) in send {
        request = request.header(*name, *value);
    }
    let response = request.call().unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let values = names
        .iter()
        .map(|name| {
            response
                .headers()
                .get(*name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .collect();
    (response.status().as_u16(), values)
}

#[test]
fn the_page_and_its_files_carry_the_policy_nosniff_their_types_and_a_validator() {
    const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                          img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
                          frame-ancestors 'none'; form-action 'none'";
    let db = Db::sqlite();
    let secret = make_token(&db, "deploy", &["--prefix", "deploy/"]);
    let tokens = db.file("tokens.json");
    let server = Server::start_serving(&db, &["--tokens", tokens.to_str().unwrap()]);
    let names = [
        "content-type",
        "content-security-policy",
        "x-content-type-options",
        "etag",
    ];
    // Served to anyone, with tokens too: the page holds no data.
    for (path, kind) in [
        ("/ui/", "text/html; charset=utf-8"),
        ("/ui", "text/html; charset=utf-8"),
        ("/ui/style.css", "text/css; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/timeline.js", "text/javascript; charset=utf-8"),
        ("/ui/icon.svg", "image/svg+xml"),
    ] {
        let (status, got) = head_of(&server, path, &[], &names);
        assert_eq!(status, 200, "{path}");
        assert_eq!(got[0].as_deref(), Some(kind), "{path}");
        assert_eq!(got[1].as_deref(), Some(POLICY), "{path}");
        assert_eq!(got[2].as_deref(), Some("nosniff"), "{path}");
        let tag = got[3].clone().expect("an ETag");
        let (again, _) = head_of(&server, path, &[("if-none-match", &tag)], &names);
        assert_eq!(again, 304, "{path}: the browser's copy is this one");
    }
    assert_eq!(
        server.get("/ui/nope.js").problem(404)["type"],
        "no-such-route"
    );
    // Everything else still needs the token.
    for path in ["/locks", "/queues", "/log", "/metrics"] {
        assert_eq!(call(&server, "GET", path, None, None).status, 401, "{path}");
        let (_, got) = head_of(&server, "/health", &[], &names);
        assert_eq!(
            got[2].as_deref(),
            Some("nosniff"),
            "every answer says nosniff"
        );
    }
    assert_eq!(
        call(&server, "GET", "/queues", Some(&secret), None).status,
        200
    );
}

#[test]
fn queues_and_the_log_by_prefix_show_only_what_the_token_may_read() {
    for db in every_store() {
        let deploy = make_token(&db, "deploy", &["--prefix", "deploy/"]);
        let all = make_token(&db, "all", &["--all-resources"]);
        let tokens = db.file("tokens.json");
        let server = Server::start_serving(&db, &["--tokens", tokens.to_str().unwrap()]);
        for resource in ["deploy/a", "other/b"] {
            db.json(&["acquire", resource, "--owner", "h", "--ttl", "300"], 0);
        }
        let w1 = db.spawn(
            &[
                "acquire", "deploy/a", "--owner", "w1", "--ttl", "60", "--wait", "120s", "--shared",
            ],
            "w1",
        );
        until_waiting(&db, "deploy/a", 1);
        let w2 = db.spawn(
            &[
                "acquire", "deploy/a", "other/b", "--owner", "w2", "--ttl", "60", "--wait", "120s",
            ],
            "w2",
        );
        until_waiting(&db, "deploy/a", 2);
        let queues = |token: &str, query: &str| {
            let answer = call(
                &server,
                "GET",
                &format!("/queues{query}"),
                Some(token),
                None,
            );
            assert_eq!(answer.status, 200);
            answer.json()["queues"].clone()
        };
        let seen = queues(&all, "");
        let resources: Vec<&Value> = seen
            .as_array()
            .unwrap()
            .iter()
            .map(|q| &q["resource"])
            .collect();
        assert_eq!(resources, [&json!("deploy/a"), &json!("other/b")], "{seen}");
        let first = &seen[0]["waiters"];
        assert_eq!(first[0]["owner"], "w1", "{seen}");
        assert_eq!(first[0]["shared"], true, "{seen}");
        assert!(
            first[0]["since"]
                .as_str()
                .is_some_and(|at| at.ends_with('Z')),
            "{seen}"
        );
        assert_eq!(first[1]["owner"], "w2", "{seen}");
        assert_eq!(
            first[1]["members"],
            json!(["deploy/a", "other/b"]),
            "{seen}"
        );
        assert_eq!(seen[1]["waiters"][0]["owner"], "w2", "{seen}");
        // The deploy/ token: deploy/a's queue only, and of w2's set only deploy/a.
        let scoped = queues(&deploy, "");
        assert_eq!(scoped.as_array().unwrap().len(), 1, "{scoped}");
        assert_eq!(
            scoped[0]["waiters"][1]["members"],
            json!(["deploy/a"]),
            "{scoped}"
        );
        assert_eq!(queues(&all, "?prefix=other%2F")[0]["resource"], "other/b");
        assert_eq!(queues(&all, "?prefix=none"), json!([]));
        let bad = call(
            &server,
            "GET",
            "/queues?prefix=a&prefix=b",
            Some(&all),
            None,
        );
        bad.problem(422, "invalid-request");
        assert_eq!(call(&server, "GET", "/queues", None, None).status, 401);
        // The log of a prefix: its events only, each saying the end of the lease it left.
        let log = call(&server, "GET", "/log?prefix=deploy%2F", Some(&all), None);
        assert_eq!(log.status, 200);
        let body = log.json_lines();
        assert!(!body.is_empty());
        for event in &body {
            assert_eq!(event["resource"], "deploy/a", "{event}");
            assert!(event["expires_at"].is_string(), "{event}");
        }
        drop((w1, w2));
    }
}
