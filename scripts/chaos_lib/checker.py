"""The checker: reads a campaign's whole history and names every anomaly in it.

A history (see `history.load`, and the planted histories of `test_checker`) is a dict:

- `clients`: id -> {"store", "way", "kind"}: which store a client uses, through which way in
  (`sqlite`, `pg`, `pg~`, `srv-sqlite~`, …; a `~` means through a proxy), and what it does;
- `calls`: every distlock command a client ran: {"client", "op" (run, acquire, renew,
  release), "owner", "store", "resources", "mode", "ttl", "wait", "start", "end", "exit" (None
  when the client had to kill it), "timed_out", "granted" ({resource: fence} from the answer),
  "interrupted" (the signal the client sent to give up waiting, or None), "stderr"};
- `sections`: every critical section: {"client", "owner", "store", "mode" ("exclusive",
  "shared" or "limit:N"), "fences" ({resource: fence}), "start", "end" (None when the command
  was killed before it could say), "reason" ("done", "terminated", "lease")};
- `register`: every operation on the fenced register, in the register's own order per
  resource: {"store", "resource", "t", "fence", "op" ("write" or "read"), "accepted", "owner"};
- `store_log`: store -> the events `distlock log` printed, oldest first;
- `faults`: what the nemesis did: {"id", "kind", "target", "start", "end", "ways" (the ways in
  it made unavailable), "clients" (the clients it stopped), "outage", "recovery"};
- `final`: store -> {"live": [lock objects], "waiting": {resource: K}} once the campaign
  settled;
- `started`: when the campaign started (times in details are shown from it).

Every time is the host's real wall clock in seconds (see `timeline`). `check` returns the
anomalies; `figures` the counts the runner prints.
"""

from collections import Counter, defaultdict
from dataclasses import dataclass

from .timeline import covered, merge, parse_store_time

# What each kind of anomaly means; the runner prints them in this order.
KINDS = {
    "two-holders": "critical sections of more holders at once than the resource's mode "
    "allows, by their own start and end times",
    "store-two-holders": "live tenures at once in the store's own history beyond what the "
    "mode allows",
    "fence-reused": "a fence handed to a second tenure of a resource",
    "fence-backwards": "a new tenure's fence not above every earlier fence of its resource",
    "stale-write": "a write the register accepted with a fence lower than one it had seen",
    "grant-missing": "a grant a client was answered (owner, fence) missing from the store's "
    "history",
    "expired-renewed": "a lease renewed, extended or released after it had ended",
    "held-too-long": "a finished command's lock held longer than its lease plus the "
    "outages on its way",
    "lost-waiter": "a waiting call not answered within its wait plus the outages on its way",
    "hung-call": "a call (or a run after its command ended) not done within its budget",
    "unguarded": "a command still acting after its guard's lease ended",
    "lease-lost": "a lease lost (run 124, renew 1 or 77) with no fault on the holder's way in "
    "or on the holder itself: one client's stall costing another its lease",
    "unexpected-exit": "an exit code the contract does not give for what happened (a panic "
    "among them)",
    "stuck-at-end": "a lock or a waiter still there once every client was gone and every "
    "lease over",
}

# Store times have millisecond precision (`…52.123Z`).
STORE_TIME_TOLERANCE = 0.002
# A guard continued after its lease ended while it was stopped stops its command at once (the
# command records its end on SIGTERM); this much is left for a loaded machine to schedule both.
PAUSE_GRACE = 3.0
# Beyond its own wait and the outages on its way, a call may spend the connect budget that the
# contract gives a try-once call (5 s), and a loaded machine's scheduling.
CALL_SLACK = 10.0
# After its command ends, `run` releases at once; a loaded machine may take this long.
RELEASE_SLACK = 3.0
# `--kill-after` of the campaign's runs.
KILL_AFTER = 1.0

# The exit codes each operation may give in a campaign, whatever the faults (the contract's
# table); interruptions and the nemesis' SIGKILL are allowed where they happened.
ALLOWED_EXITS = {
    "run": {0, 74, 75, 124},
    "acquire": {0, 74, 75},
    "renew": {0, 1, 74, 77},
    "release": {0, 1, 74, 77},
}


@dataclass
class Anomaly:
    kind: str
    at: float
    detail: str


def limit_of(mode):
    return int(mode.split(":", 1)[1])


def compatible(mode, others):
    """Whether a holder in `mode` may hold beside live holders in the modes `others`."""
    if not others:
        return True
    if mode == "exclusive":
        return False
    if mode == "shared":
        return all(m == "shared" for m in others)
    return all(m == mode for m in others) and len(others) + 1 <= limit_of(mode)


def event_mode(event):
    if event.get("shared"):
        return "shared"
    if "limit" in event:
        return f"limit:{event['limit']}"
    return "exclusive"


class Tenure:
    """One tenure as the store's history tells it."""

    def __init__(self, store, resource, fence, owner, mode, start, ttl):
        self.store = store
        self.resource = resource
        self.fence = fence
        self.owner = owner
        self.mode = mode
        self.start = start
        self.ttl = ttl
        # When the lease ends by the store's last word (acquire, renew, extend + ttl).
        self.lease_end = None if ttl is None else start + ttl
        # When it was released or broken, if it was.
        self.released = None

    @property
    def end(self):
        """When the tenure ended: released, or its lease over; None when unknown."""
        if self.lease_end is None:
            return self.released
        if self.released is None:
            return self.lease_end
        return min(self.released, self.lease_end)


class Checker:
    def __init__(self, history):
        self.h = history
        self.t0 = history.get("started") or 0.0
        self.anomalies = []
        self.calls = history.get("calls", [])
        self.sections = history.get("sections", [])
        self.clients = history.get("clients", {})
        self.faults = history.get("faults", [])
        # The TTL each owner asked for (owners are unique per call).
        self.ttl = {}
        self.call_of = {}
        for call in self.calls:
            if call.get("owner") is not None:
                self.call_of[(call["store"], call["owner"])] = call
                if call.get("ttl") is not None and call["op"] in ("run", "acquire"):
                    self.ttl[(call["store"], call["owner"])] = call["ttl"]
        self.pauses = defaultdict(list)
        self.kills = defaultdict(list)
        outage_intervals = defaultdict(list)
        for fault in self.faults:
            if fault.get("end") is None:
                continue
            for client in fault.get("clients", []):
                if fault["kind"] == "client-pause":
                    self.pauses[client].append((fault["start"], fault["end"]))
                if fault["kind"] == "client-kill":
                    self.kills[client].append(fault["start"])
            if not fault.get("outage"):
                continue
            span = (fault["start"], fault["end"])
            for client, info in self.clients.items():
                if client in fault.get("clients", []) or info.get("way") in fault.get("ways", []):
                    outage_intervals[client].append(span)
        self.outages = {c: merge(spans) for c, spans in outage_intervals.items()}
        self.raw_outages = outage_intervals
        # The last thing each section's holder did: its end, or its last register operation.
        self.last_op = {}
        for op in history.get("register", []):
            key = (op["store"], op["owner"])
            self.last_op[key] = max(self.last_op.get(key, op["t"]), op["t"])
        self.tenures = {}

    def when(self, t):
        return f"+{t - self.t0:.3f}s"

    def flag(self, kind, at, detail):
        self.anomalies.append(Anomaly(kind, at, detail))

    def outage(self, client, start, end):
        return covered(self.outages.get(client, []), start, end)

    def last_act(self, section):
        times = [section["start"]]
        if section.get("end") is not None:
            times.append(section["end"])
        op = self.last_op.get((section["store"], section["owner"]))
        if op is not None:
            times.append(op)
        return max(times)

    # The store's own history.

    def read_store_histories(self):
        for store, events in self.h.get("store_log", {}).items():
            by_resource = defaultdict(list)
            for event in events:
                by_resource[event["resource"]].append(event)
            for resource, evs in by_resource.items():
                self.tenures[(store, resource)] = self.read_resource(store, resource, evs)

    def read_resource(self, store, resource, events):
        tenures = {}
        highest = 0
        for event in events:
            at = parse_store_time(event["at"])
            fence = event["fence"]
            kind = event["event"]
            owner = event["owner"]
            ttl = self.ttl.get((store, owner))
            where = f"{store} {resource}"
            if kind in ("acquired", "taken_over"):
                if fence in tenures:
                    old = tenures[fence]
                    self.flag(
                        "fence-reused",
                        at,
                        f"{where}: fence {fence} handed to {owner} at {self.when(at)}, "
                        f"already {old.owner}'s since {self.when(old.start)}",
                    )
                elif fence <= highest:
                    self.flag(
                        "fence-backwards",
                        at,
                        f"{where}: fence {fence} handed to {owner} at {self.when(at)} after "
                        f"fence {highest}",
                    )
                highest = max(highest, fence)
                tenures[fence] = Tenure(store, resource, fence, owner, event_mode(event), at, ttl)
                continue
            tenure = tenures.get(fence)
            if tenure is None or tenure.owner != owner:
                continue
            if kind in ("renewed", "extended", "released"):
                ended = tenure.end
                if ended is not None and at > ended + STORE_TIME_TOLERANCE:
                    self.flag(
                        "expired-renewed",
                        at,
                        f"{where}: {owner}'s fence {fence} {kind} at {self.when(at)}, "
                        f"after it ended at {self.when(ended)}",
                    )
            if kind in ("renewed", "extended") and ttl is not None:
                tenure.lease_end = at + ttl
            elif kind in ("released", "broken") and tenure.released is None:
                tenure.released = at
        return tenures

    def tenure(self, store, resource, fence):
        return self.tenures.get((store, resource), {}).get(fence)

    def check_store_overlaps(self):
        for (store, resource), by_fence in sorted(self.tenures.items()):
            items = sorted(by_fence.values(), key=lambda t: (t.start, t.fence))
            active = []
            for b in items:
                active = [a for a in active if a.end > b.start + STORE_TIME_TOLERANCE]
                if not compatible(b.mode, [a.mode for a in active]):
                    others = ", ".join(
                        f"fence {a.fence} ({a.owner}, {a.mode}) live until {self.when(a.end)}"
                        for a in active
                    )
                    self.flag(
                        "store-two-holders",
                        b.start,
                        f"{store} {resource}: fence {b.fence} ({b.owner}, {b.mode}) granted at "
                        f"{self.when(b.start)} beside {others}",
                    )
                # A tenure whose end cannot be told (an owner no call names) is judged as it
                # begins, not held against later ones.
                if b.end is not None:
                    active.append(b)

    # The clients' side.

    def paused_across(self, client, moment, until):
        """The pause of `client` that spans `moment` (its lease's end) and after which it acted
        no later than `until` allows, if any."""
        for start, end in self.pauses.get(client, []):
            if (
                start <= moment + STORE_TIME_TOLERANCE
                and end >= moment - STORE_TIME_TOLERANCE
                and until <= end + PAUSE_GRACE
            ):
                return (start, end)
        return None

    def check_sections(self):
        by_resource = defaultdict(list)
        for section in self.sections:
            section["_last"] = self.last_act(section)
            for resource, fence in section["fences"].items():
                by_resource[(section["store"], resource)].append((section, fence))
        for (store, resource), items in sorted(by_resource.items()):
            items.sort(key=lambda item: item[0]["start"])
            active = []
            for b, b_fence in items:
                active = [(a, f) for a, f in active if a["_last"] > b["start"]]
                holding = [(a, f) for a, f in active if not self.excused(store, resource, a, f, b)]
                if not compatible(b["mode"], [a["mode"] for a, _ in holding]):
                    others = ", ".join(
                        f"{a['owner']} (fence {f}, {a['mode']}, {self.when(a['start'])}.."
                        f"{self.when(a['_last'])})"
                        for a, f in holding
                    )
                    self.flag(
                        "two-holders",
                        b["start"],
                        f"{store} {resource}: {b['owner']} (fence {b_fence}, {b['mode']}) began "
                        f"at {self.when(b['start'])} while {others} held it",
                    )
                active.append((b, b_fence))
            for section, fence in items:
                self.check_guarded(store, resource, section, fence)

    def excused(self, store, resource, a, a_fence, b):
        """Whether holder `a` still acting when `b` began is the documented limit of leases: `a`
        was stopped across its lease's end (by the store's history), stopped before `b` began,
        and did not go on long after it continued. Its writes are then the register's to
        refuse."""
        tenure = self.tenure(store, resource, a_fence)
        if tenure is None or tenure.lease_end is None:
            return False
        pause = self.paused_across(a["client"], tenure.lease_end, a["_last"])
        return pause is not None and pause[0] <= b["start"]

    def check_guarded(self, store, resource, section, fence):
        tenure = self.tenure(store, resource, fence)
        if tenure is None or tenure.end is None:
            return
        last = section["_last"]
        if last <= tenure.end + STORE_TIME_TOLERANCE:
            return
        released_early = tenure.released is not None and (
            tenure.lease_end is None or tenure.released < tenure.lease_end
        )
        if not released_early and self.paused_across(section["client"], tenure.lease_end, last):
            return
        how = (
            f"released at {self.when(tenure.released)}"
            if released_early
            else f"its lease ended at {self.when(tenure.lease_end)}"
        )
        self.flag(
            "unguarded",
            last,
            f"{store} {resource}: {section['owner']}'s command (fence {fence}) acted at "
            f"{self.when(last)}, {last - tenure.end:.3f} s after {how}",
        )

    def check_register(self):
        highest = {}
        for op in self.h.get("register", []):
            key = (op["store"], op["resource"])
            seen = highest.get(key, 0)
            if op["op"] == "write" and op["accepted"] and op["fence"] < seen:
                self.flag(
                    "stale-write",
                    op["t"],
                    f"{op['store']} {op['resource']}: {op['owner']}'s write with fence "
                    f"{op['fence']} accepted at {self.when(op['t'])} after fence {seen}",
                )
            if op["accepted"]:
                highest[key] = max(seen, op["fence"])

    def check_grants(self):
        seen = set()
        claims = []
        for call in self.calls:
            for resource, fence in (call.get("granted") or {}).items():
                claims.append((call["store"], resource, fence, call["owner"], call["end"]))
        for section in self.sections:
            for resource, fence in section["fences"].items():
                claims.append(
                    (section["store"], resource, fence, section["owner"], section["start"])
                )
        for store, resource, fence, owner, at in claims:
            if (store, resource, fence, owner) in seen:
                continue
            seen.add((store, resource, fence, owner))
            tenure = self.tenure(store, resource, fence)
            if tenure is None or tenure.owner != owner:
                found = "no tenure" if tenure is None else f"{tenure.owner}'s tenure"
                self.flag(
                    "grant-missing",
                    at,
                    f"{store} {resource}: {owner} was granted fence {fence} "
                    f"(seen {self.when(at)}); the store's history has {found} with that fence",
                )

    def check_held(self):
        for section in self.sections:
            if section.get("reason") != "done" or section.get("end") is None:
                continue
            ttl = self.ttl.get((section["store"], section["owner"]))
            if ttl is None:
                continue
            for resource, fence in section["fences"].items():
                tenure = self.tenure(section["store"], resource, fence)
                if tenure is None or tenure.end is None:
                    continue
                held = tenure.end - section["end"]
                away = self.outage(section["client"], section["end"], tenure.end)
                if held > ttl + away + RELEASE_SLACK:
                    self.flag(
                        "held-too-long",
                        tenure.end,
                        f"{section['store']} {resource}: {section['owner']}'s command ended at "
                        f"{self.when(section['end'])}, its lock (fence {fence}) held until "
                        f"{self.when(tenure.end)}: {held:.3f} s, past its {ttl} s lease and "
                        f"{away:.3f} s of outages",
                    )

    def check_calls(self):
        section_of = {(s["store"], s["owner"]): s for s in self.sections}
        for call in self.calls:
            client = call["client"]
            wait = call.get("wait") or 0
            name = f"{call['client']} {call['op']} {call.get('owner')}"
            if call.get("timed_out"):
                kind = "lost-waiter" if wait > 0 else "hung-call"
                self.flag(
                    kind,
                    call["end"],
                    f"{name}: no answer in {call['end'] - call['start']:.1f} s "
                    f"(--wait {wait}s); the client killed it",
                )
                continue
            section = section_of.get((call["store"], call.get("owner")))
            answered = call["end"]
            if call["op"] == "run" and section is not None:
                answered = section["start"]
            waited = answered - call["start"]
            budget = wait + self.outage(client, call["start"], answered) + CALL_SLACK
            if waited > budget:
                kind = "lost-waiter" if wait > 0 else "hung-call"
                self.flag(
                    kind,
                    answered,
                    f"{name}: answered after {waited:.1f} s (--wait {wait}s, budget "
                    f"{budget:.1f} s with outages)",
                )
            if call["op"] == "run" and section is not None:
                last = self.last_act(section)
                tail = call["end"] - last
                ttl = call.get("ttl") or 0
                budget = ttl + KILL_AFTER + self.outage(client, last, call["end"]) + CALL_SLACK
                if tail > budget:
                    self.flag(
                        "hung-call",
                        call["end"],
                        f"{name}: exited {tail:.1f} s after its command's last act "
                        f"(budget {budget:.1f} s with outages)",
                    )
            self.check_exit(call)

    def check_lost_leases(self):
        for call in self.calls:
            if call["op"] == "run" and call.get("exit") == 124:
                # The guard decides within its last lease: renewals failing for a lease's
                # length, then --kill-after, and a loaded machine's scheduling.
                since = call["end"] - ((call.get("ttl") or 0) + KILL_AFTER + RELEASE_SLACK)
            elif call["op"] == "renew" and call.get("exit") in (1, 77):
                since = call["start"] - 1.0
            else:
                continue
            spans = self.raw_outages.get(call["client"], [])
            if any(start <= call["end"] and end >= since for start, end in spans):
                continue
            self.flag(
                "lease-lost",
                call["end"],
                f"{call['client']} {call['op']} {call.get('owner')}: exit {call['exit']} at "
                f"{self.when(call['end'])} with no fault on its way or on it since "
                f"{self.when(since)}: {(call.get('stderr') or '').strip()[-300:]}",
            )

    def check_exit(self, call):
        code = call.get("exit")
        stderr = call.get("stderr") or ""
        name = f"{call['client']} {call['op']} {call.get('owner')}"
        if code == 101 or "panicked" in stderr:
            self.flag("unexpected-exit", call["end"], f"{name}: panicked ({code}): {stderr[-300:]}")
            return
        allowed = set(ALLOWED_EXITS.get(call["op"], {0}))
        if call.get("interrupted"):
            # Given up as the contract says (128+N), or ended by the signal itself when it came
            # before distlock had started to wait.
            allowed.update((128 + call["interrupted"], -call["interrupted"]))
        if any(call["start"] <= k <= call["end"] for k in self.kills.get(call["client"], [])):
            allowed.add(-9)
        if code not in allowed:
            self.flag(
                "unexpected-exit",
                call["end"],
                f"{name}: exit {code} (expected one of {sorted(allowed)}): {stderr[-300:]}",
            )

    def check_final(self):
        for store, state in sorted(self.h.get("final", {}).items()):
            for lock in state.get("live", []):
                self.flag(
                    "stuck-at-end",
                    self.h.get("ended", 0.0),
                    f"{store} {lock.get('resource')}: still held by {lock.get('owner')} (fence "
                    f"{lock.get('fence')}) once every client was gone and every lease over",
                )
            for resource, waiting in sorted(state.get("waiting", {}).items()):
                if waiting:
                    self.flag(
                        "stuck-at-end",
                        self.h.get("ended", 0.0),
                        f"{store} {resource}: {waiting} waiting once every client was gone",
                    )

    def run(self):
        self.read_store_histories()
        self.check_store_overlaps()
        self.check_sections()
        self.check_register()
        self.check_grants()
        self.check_held()
        self.check_calls()
        self.check_lost_leases()
        self.check_final()
        self.anomalies.sort(key=lambda a: (a.at, a.kind))
        return self.anomalies


def check(history):
    """Every anomaly in `history`, by time."""
    return Checker(history).run()


def recoveries(history):
    """For each fault that made a store unreachable on some ways, how long after it was back
    (this fault and every other on those ways over) the first grant on those ways came: a list
    of (seconds, fault). A recovery that another fault on those ways interrupted before the
    first grant is not measured (that fault's own recovery is)."""
    grants = []
    way_of = {c: info.get("way") for c, info in history.get("clients", {}).items()}
    for call in history.get("calls", []):
        if call["op"] == "acquire" and call.get("exit") == 0:
            grants.append((call["end"], way_of.get(call["client"])))
    for section in history.get("sections", []):
        grants.append((section["start"], way_of.get(section["client"])))
    grants.sort(key=lambda g: g[0])
    faults = [
        f
        for f in history.get("faults", [])
        if f.get("recovery") and f.get("ways") and f.get("end") is not None
    ]
    found = []
    for fault in faults:
        ways = set(fault["ways"])
        back = fault["end"]
        moved = True
        while moved:
            moved = False
            for other in faults:
                if ways & set(other["ways"]) and other["start"] <= back < other["end"]:
                    back = other["end"]
                    moved = True
        first = next((t for t, way in grants if t >= back and way in ways), None)
        if first is None:
            continue
        if any(ways & set(other["ways"]) and back < other["start"] < first for other in faults):
            continue
        found.append((first - back, fault))
    return found


def figures(history, anomalies):
    """The counts the runner prints: operations, faults, anomalies by kind, fenced writes,
    lost leases and recoveries."""
    calls = history.get("calls", [])
    ops = Counter(c["op"] for c in calls)
    exits = defaultdict(Counter)
    for call in calls:
        exits[call["op"]]["timeout" if call.get("timed_out") else call.get("exit")] += 1
    faults = Counter(f["kind"] for f in history.get("faults", []))
    kinds = Counter(a.kind for a in anomalies)
    writes = Counter(
        "accepted" if op["accepted"] else "refused"
        for op in history.get("register", [])
        if op["op"] == "write"
    )
    found = recoveries(history)
    longest = max(found, key=lambda r: r[0]) if found else None
    by_kind = defaultdict(list)
    for seconds, fault in found:
        by_kind[fault["kind"]].append(seconds)
    return {
        "operations": len(calls),
        "by_op": dict(ops),
        "exits": {op: dict(counter) for op, counter in exits.items()},
        "faults": sum(faults.values()),
        "faults_by_kind": dict(faults),
        "anomalies": len(anomalies),
        "anomalies_by_kind": {k: kinds.get(k, 0) for k in KINDS},
        "sections": len(history.get("sections", [])),
        "writes": dict(writes),
        "longest_recovery": None
        if longest is None
        else {
            "seconds": longest[0],
            "kind": longest[1]["kind"],
            "target": longest[1].get("target"),
            "at": longest[1]["end"] - history.get("started", 0.0),
        },
        "recoveries": len(found),
        "recoveries_by_kind": {
            kind: {
                "count": len(times),
                "longest": max(times),
                "median": sorted(times)[len(times) // 2],
            }
            for kind, times in sorted(by_kind.items())
        },
    }
