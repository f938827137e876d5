"""The checker on planted histories: a clean one that passes, and each kind of anomaly planted
in it, which the checker must name, so that a campaign with no anomaly cannot pass vacuously.

    cd scripts && python3 -m unittest chaos_lib.test_checker

(`cargo test --test chaos_checker` runs it.) The clean history is not trivially clean: it has
holders one after another with rising fences, shared and counted holders side by side, a
holder stopped past its lease whose late write the register refused while the next holder
held the lock, and a waiter that waited out an outage: all of it allowed.
"""

import copy
import unittest
from datetime import datetime, timezone

from . import checker

T0 = 1_800_000_000.0


def stamp(t):
    """A store's time for `t` (milliseconds, as distlock prints them)."""
    moment = datetime.fromtimestamp(t, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class History:
    """A small history built tenure by tenure, as a campaign would record it."""

    def __init__(self):
        self.h = {
            "started": T0,
            "ended": T0 + 100,
            "seed": 7,
            "clients": {},
            "calls": [],
            "sections": [],
            "register": [],
            "store_log": {"sqlite": []},
            "faults": [],
            "final": {"sqlite": {"live": [], "waiting": {"excl": 0}}},
        }

    def client(self, name, way="sqlite", kind="run"):
        self.h["clients"][name] = {"store": "sqlite", "way": way, "kind": kind}

    def event(self, at, resource, owner, fence, event, mode="exclusive"):
        entry = {"at": stamp(T0 + at), "resource": resource, "owner": owner, "fence": fence,
                 "event": event}
        if mode == "shared":
            entry["shared"] = True
        elif mode.startswith("limit:"):
            entry["limit"] = int(mode.split(":")[1])
        self.h["store_log"]["sqlite"].append(entry)

    def write(self, at, resource, fence, owner, client, accepted=True, op="write"):
        self.h["register"].append({"store": "sqlite", "resource": resource, "t": T0 + at,
                                   "fence": fence, "op": op, "accepted": accepted,
                                   "owner": owner, "client": client})

    def run(self, client, owner, resource, fence, start, end, *, ttl=4, mode="exclusive",
            renewals=(), release=True, writes=(), wait=0, exit_code=0):
        """A `run` that was granted `resource` at `start` - 0.01 s, whose command ran from
        `start` to `end` (writing at the times `writes`), renewed at `renewals`, and released
        at `end` + 0.01 s."""
        self.h["calls"].append({"client": client, "op": "run", "owner": owner, "store": "sqlite",
                                "resources": [resource], "mode": mode, "ttl": ttl, "wait": wait,
                                "start": T0 + start - 0.05, "end": T0 + end + 0.05,
                                "exit": exit_code, "timed_out": False, "granted": {},
                                "interrupted": None})
        self.h["sections"].append({"client": client, "owner": owner, "store": "sqlite",
                                   "mode": mode, "fences": {resource: fence},
                                   "start": T0 + start, "end": None if end is None else T0 + end,
                                   "reason": "done"})
        self.event(start - 0.01, resource, owner, fence, "acquired", mode)
        for at in renewals:
            self.event(at, resource, owner, fence, "renewed", mode)
        op = "write" if mode == "exclusive" else "read"
        for at in writes:
            self.write(at, resource, fence, owner, client, op=op)
        if release:
            self.event(end + 0.01, resource, owner, fence, "released", mode)

    def fault(self, kind, start, end, ways=(), clients=(), outage=True):
        self.h["faults"].append({"id": len(self.h["faults"]), "kind": kind, "target": "t",
                                 "start": T0 + start, "end": T0 + end, "ways": list(ways),
                                 "clients": list(clients), "outage": outage,
                                 "recovery": kind != "client-pause"})


def clean():
    """A history with no anomaly, though it has everything the checker must allow."""
    b = History()
    for name in ("a", "b", "c", "w"):
        b.client(name)
    # Exclusive holders one after another, fences rising, renewals keeping a long one alive.
    b.run("a", "a.1", "excl", 1, 1.0, 2.0, writes=[1.5])
    b.run("b", "b.1", "excl", 2, 2.5, 9.0, renewals=[3.8, 5.1, 6.4, 7.7], writes=[3.0, 8.5])
    b.run("a", "a.2", "excl", 3, 9.5, 10.5, writes=[10.0])
    # Shared holders side by side; at most 2 of a --limit 2 at once.
    b.run("a", "a.3", "rw", 4, 11.0, 13.0, mode="shared", writes=[11.5])
    b.run("b", "b.2", "rw", 5, 11.5, 12.5, mode="shared", writes=[12.0])
    b.run("a", "a.4", "sem", 6, 14.0, 16.0, mode="limit:2")
    b.run("b", "b.3", "sem", 7, 14.5, 15.5, mode="limit:2")
    b.run("c", "c.1", "sem", 8, 15.6, 16.5, mode="limit:2")
    # A holder stopped from 20.5 to 30.0, past its lease (granted 20.0, 4 s TTL): the store
    # gave the lock to the next holder at 24.5; continued, its command wrote once more (the
    # register refused it, the next holder having written) and its guard stopped it (124).
    b.run("c", "c.2", "excl", 9, 20.0, 30.2, writes=[20.2], release=False, exit_code=124)
    b.h["sections"][-1]["reason"] = "terminated"
    b.fault("client-pause", 20.5, 30.0, clients=["c"])
    b.run("a", "a.5", "excl", 10, 24.5, 26.0, writes=[25.0])
    b.write(30.1, "excl", 9, "c.2", "c", accepted=False)
    # A waiter whose wait (2 s) ran out while the store was away for 12 s.
    b.fault("pg-stop", 40.0, 52.0, ways=["sqlite"])
    b.h["calls"].append({"client": "w", "op": "acquire", "owner": "w.1", "store": "sqlite",
                         "resources": ["excl"], "mode": "exclusive", "ttl": 4, "wait": 2,
                         "start": T0 + 41.0, "end": T0 + 60.0, "exit": 74, "timed_out": False,
                         "granted": {}, "interrupted": None})
    return b.h


def kinds(history):
    return {a.kind for a in checker.check(history)}


class CleanHistory(unittest.TestCase):
    def test_a_clean_history_has_no_anomaly(self):
        self.assertEqual(checker.check(clean()), [])

    def test_without_its_pause_the_late_holder_is_an_anomaly_of_three_kinds(self):
        h = clean()
        h["faults"] = [f for f in h["faults"] if f["kind"] != "client-pause"]
        self.assertEqual(kinds(h), {"two-holders", "unguarded", "lease-lost"})

    def test_without_its_outage_the_waiter_is_lost(self):
        h = clean()
        h["faults"] = [f for f in h["faults"] if f["kind"] != "pg-stop"]
        self.assertEqual(kinds(h), {"lost-waiter"})

    def test_its_figures_count_what_happened(self):
        h = clean()
        figures = checker.figures(h, checker.check(h))
        self.assertEqual(figures["operations"], 11)
        self.assertEqual(figures["anomalies"], 0)
        self.assertEqual(figures["writes"], {"accepted": 6, "refused": 1})
        self.assertEqual(figures["faults_by_kind"], {"client-pause": 1, "pg-stop": 1})


class PlantedAnomalies(unittest.TestCase):
    """Each kind of anomaly planted in the clean history, and named by the checker."""

    def planted(self, plant):
        h = copy.deepcopy(clean())
        b = History()
        b.h = h
        plant(b)
        return kinds(h)

    def test_every_kind_has_a_planted_test(self):
        names = {name for name in dir(self) if name.startswith("test_")}
        for kind in checker.KINDS:
            self.assertIn("test_" + kind.replace("-", "_"), names)

    def test_two_holders(self):
        # b's command starts while a's still runs, though the store granted b after a released.
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 62.0, writes=[61.0])
            b.run("b", "b.9", "excl", 21, 63.0, 64.0)
            b.h["sections"][-1]["start"] = T0 + 61.5

        self.assertEqual(self.planted(plant), {"two-holders"})

    def test_two_holders_counts_a_limit(self):
        def plant(b):
            for i, name in enumerate(("a", "b", "c")):
                b.run(name, f"{name}.9", "sem", 20 + i, 60.0 + i, 70.0)
                # The store's history keeps within the limit: only the commands overlap.
                b.h["store_log"]["sqlite"][-2]["at"] = stamp(T0 + 70.5 + i)

        self.assertIn("two-holders", self.planted(plant))

    def test_two_holders_is_not_excused_by_a_pause_that_ended_before_the_lease(self):
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 63.0, writes=[62.5])
            b.fault("client-pause", 60.5, 61.0, clients=["a"])
            b.run("b", "b.9", "excl", 21, 64.0, 65.0)
            b.h["sections"][-1]["start"] = T0 + 62.0

        self.assertEqual(self.planted(plant), {"two-holders"})

    def test_store_two_holders(self):
        # The store grants b while a's lease (60.0 + 4 s) is live.
        def plant(b):
            b.event(60.0, "excl", "a.9", 20, "acquired")
            b.event(62.0, "excl", "b.9", 21, "taken_over")
            b.h["calls"].append({"client": "a", "op": "acquire", "owner": "a.9", "store": "sqlite",
                                 "resources": ["excl"], "ttl": 4, "start": T0 + 59.9,
                                 "end": T0 + 60.1, "exit": 0, "granted": {}, "wait": 0})
            b.h["calls"].append({"client": "b", "op": "acquire", "owner": "b.9", "store": "sqlite",
                                 "resources": ["excl"], "ttl": 4, "start": T0 + 61.9,
                                 "end": T0 + 62.1, "exit": 0, "granted": {}, "wait": 0})

        self.assertEqual(self.planted(plant), {"store-two-holders"})

    def test_store_two_holders_beside_shared_holders(self):
        def plant(b):
            b.run("a", "a.9", "rw", 20, 60.0, 63.0, mode="shared")
            b.event(61.0, "rw", "b.9", 21, "acquired")

        self.assertIn("store-two-holders", self.planted(plant))

    def test_fence_reused(self):
        def plant(b):
            b.run("a", "a.9", "excl", 2, 60.0, 61.0)

        self.assertIn("fence-reused", self.planted(plant))

    def test_fence_backwards(self):
        def plant(b):
            b.run("a", "a.9", "excl", 5, 60.0, 61.0)

        self.assertEqual(self.planted(plant), {"fence-backwards"})

    def test_stale_write(self):
        def plant(b):
            b.write(60.0, "excl", 4, "z.1", "z", accepted=True)

        self.assertEqual(self.planted(plant), {"stale-write"})

    def test_grant_missing(self):
        def plant(b):
            b.h["calls"].append({"client": "a", "op": "acquire", "owner": "a.9", "store": "sqlite",
                                 "resources": ["raw"], "ttl": 4, "start": T0 + 60.0,
                                 "end": T0 + 60.1, "exit": 0, "granted": {"raw": 77}, "wait": 0})

        self.assertEqual(self.planted(plant), {"grant-missing"})

    def test_grant_missing_when_the_fence_is_another_owners(self):
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 61.0)
            b.h["sections"][-1]["owner"] = "a.10"

        self.assertIn("grant-missing", self.planted(plant))

    def test_expired_renewed(self):
        # Granted at 59.99 with a 4 s lease, renewed at 65.0.
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 61.0, release=False)
            b.event(65.0, "excl", "a.9", 20, "renewed")

        self.assertIn("expired-renewed", self.planted(plant))

    def test_held_too_long(self):
        # The command ended at 61.0; its guard renewed on and released at 73.0.
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 61.0, release=False, renewals=[62, 65, 68, 71])
            b.event(73.0, "excl", "a.9", 20, "released")

        self.assertEqual(self.planted(plant), {"held-too-long"})

    def test_held_too_long_allows_the_outages_on_its_way(self):
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 61.0, release=False, renewals=[62, 65, 68, 71])
            b.event(73.0, "excl", "a.9", 20, "released")
            b.fault("server-kill", 61.0, 70.0, ways=["sqlite"])

        self.assertEqual(self.planted(plant), set())

    def test_lost_waiter(self):
        def plant(b):
            b.h["calls"].append({"client": "w", "op": "acquire", "owner": "w.9", "store": "sqlite",
                                 "resources": ["excl"], "ttl": 4, "wait": 2, "start": T0 + 60.0,
                                 "end": T0 + 90.0, "exit": 75, "timed_out": False, "granted": {}})

        self.assertEqual(self.planted(plant), {"lost-waiter"})

    def test_lost_waiter_never_answered(self):
        def plant(b):
            b.h["calls"].append({"client": "w", "op": "acquire", "owner": "w.9", "store": "sqlite",
                                 "resources": ["excl"], "ttl": 4, "wait": 2, "start": T0 + 60.0,
                                 "end": T0 + 182.0, "exit": None, "timed_out": True, "granted": {}})

        self.assertEqual(self.planted(plant), {"lost-waiter"})

    def test_hung_call(self):
        def plant(b):
            b.h["calls"].append({"client": "w", "op": "release", "owner": "w.9", "store": "sqlite",
                                 "resources": ["excl"], "ttl": 4, "wait": 0, "start": T0 + 60.0,
                                 "end": T0 + 80.0, "exit": 1, "timed_out": False, "granted": {}})

        self.assertEqual(self.planted(plant), {"hung-call"})

    def test_hung_call_after_its_command(self):
        # The command ended at 61.0 but run exited only at 90.0.
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 61.0)
            b.h["calls"][-1]["end"] = T0 + 90.0

        self.assertEqual(self.planted(plant), {"hung-call"})

    def test_unguarded(self):
        # Granted at 59.99 with a 4 s lease, never renewed; its command wrote at 65.0.
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 66.0, release=False, writes=[65.0])
            b.h["sections"][-1]["reason"] = "terminated"

        self.assertEqual(self.planted(plant), {"unguarded"})

    def test_unguarded_after_an_early_release(self):
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 61.0, writes=[60.5])
            b.write(61.5, "excl", 20, "a.9", "a")

        self.assertEqual(self.planted(plant), {"unguarded"})

    def test_unguarded_is_not_excused_by_a_pause_long_before(self):
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 70.0, release=False, writes=[69.0])
            b.h["sections"][-1]["reason"] = "terminated"
            b.fault("client-pause", 60.5, 64.5, clients=["a"])

        self.assertEqual(self.planted(plant), {"unguarded"})

    def test_lease_lost(self):
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 61.0, exit_code=124)

        self.assertEqual(self.planted(plant), {"lease-lost"})

    def test_lease_lost_by_a_renewal(self):
        def plant(b):
            b.h["calls"].append({"client": "w", "op": "renew", "owner": "w.9", "store": "sqlite",
                                 "resources": ["excl"], "ttl": 4, "wait": 0, "start": T0 + 60.0,
                                 "end": T0 + 60.1, "exit": 1, "timed_out": False, "granted": {}})

        self.assertEqual(self.planted(plant), {"lease-lost"})

    def test_lease_lost_allows_a_fault_on_its_way_or_on_it(self):
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 61.0, exit_code=124)
            b.fault("server-pause", 57.0, 59.0, ways=["sqlite"])
            b.run("b", "b.9", "excl", 21, 70.0, 71.0, exit_code=124)
            b.fault("client-pause", 69.0, 70.5, clients=["b"])

        self.assertEqual(self.planted(plant), set())

    def test_unexpected_exit(self):
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 61.0, exit_code=78)

        self.assertEqual(self.planted(plant), {"unexpected-exit"})

    def test_unexpected_exit_of_a_panic(self):
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 61.0, exit_code=101)
            b.h["calls"][-1]["stderr"] = "thread 'main' panicked at src/store.rs:1:1"

        self.assertEqual(self.planted(plant), {"unexpected-exit"})

    def test_unexpected_exit_allows_the_nemesis_sigkill(self):
        def plant(b):
            b.run("a", "a.9", "excl", 20, 60.0, 61.0, exit_code=-9)
            b.fault("client-kill", 61.0, 61.0, clients=["a"], outage=False)

        self.assertEqual(self.planted(plant), set())

    def test_unexpected_exit_allows_an_interruption_that_came_before_the_wait(self):
        def plant(b):
            b.h["calls"].append({"client": "w", "op": "acquire", "owner": "w.9", "store": "sqlite",
                                 "resources": ["excl"], "ttl": 4, "wait": 2, "start": T0 + 60.0,
                                 "end": T0 + 60.1, "exit": -15, "timed_out": False,
                                 "granted": {}, "interrupted": 15})

        self.assertEqual(self.planted(plant), set())
        b = History()
        b.h = copy.deepcopy(clean())
        plant(b)
        b.h["calls"][-1]["interrupted"] = None
        self.assertEqual(kinds(b.h), {"unexpected-exit"})

    def test_stuck_at_end(self):
        def plant(b):
            b.h["final"]["sqlite"]["live"].append({"resource": "excl", "owner": "a.9", "fence": 30})

        self.assertEqual(self.planted(plant), {"stuck-at-end"})

    def test_stuck_at_end_of_a_waiter(self):
        def plant(b):
            b.h["final"]["sqlite"]["waiting"]["excl"] = 1

        self.assertEqual(self.planted(plant), {"stuck-at-end"})


class Recovery(unittest.TestCase):
    def test_recovery_runs_from_the_last_overlapping_fault_to_the_first_grant_on_its_ways(self):
        b = History()
        b.client("a", way="pg")
        b.client("s", way="sqlite")
        b.fault("pg-stop", 10.0, 14.0, ways=["pg"])
        b.fault("pg-restart", 13.0, 15.0, ways=["pg"])
        b.run("s", "s.1", "excl", 1, 15.2, 15.3)
        b.run("a", "a.1", "excl", 2, 16.5, 17.0)
        found = sorted(round(seconds, 3) for seconds, _ in checker.recoveries(b.h))
        self.assertEqual(found, [1.5, 1.5])

    def test_a_recovery_cut_short_by_the_next_fault_is_not_measured(self):
        b = History()
        b.client("a", way="pg")
        b.fault("server-kill", 10.0, 11.0, ways=["pg"])
        b.fault("pg-stop", 11.2, 15.0, ways=["pg"])
        b.run("a", "a.1", "excl", 1, 15.5, 16.0)
        found = [(round(seconds, 3), f["kind"]) for seconds, f in checker.recoveries(b.h)]
        self.assertEqual(found, [(0.5, "pg-stop")])


if __name__ == "__main__":
    unittest.main()
