"""One client of a campaign: a process that loops distlock commands until the campaign ends.

    python3 -m chaos_lib.clients CONFIG CLIENT

CONFIG is the campaign's `config.json`; CLIENT names this client in it, which gives its kind,
its store and the way in (`--db`), and whether its wall clock is faked. Three kinds:

- `run`: `distlock run --wait` over a critical section (`section.py`), each time on one of the
  store's resources in the mode that resource is used in: `excl` (exclusive), `rw` (shared
  readers and exclusive writers), `sem` (`--limit 2`), the two-member set `set-a`+`set-b`, or
  one of its members alone;
- `raw`: `acquire`, then writes to the register while its own lease deadline allows (the start
  of the last successful call + TTL - a margin, as the contract's lease rule says every client
  keeps), `renew` between writes, and `release`;
- `waiter`: `acquire --wait` for a short while on a busy resource, giving up when the wait runs
  out or, now and then, when the client interrupts it (SIGINT or SIGTERM, as ^C or a stopping
  job would); a waiter granted the lock writes once and releases.

Every command is recorded in `clients/CLIENT.calls.jsonl` when it ends, and every critical
section's start and end in `clients/CLIENT.sections.jsonl` (by `section.py` for `run`, by the
client itself for the others). Each owner is unique (`CLIENT.N`), so the store's history tells
each call's tenure apart. Every choice comes from the client's own random generator, seeded
from the campaign's seed and the client's name. A call that outlives a generous budget is
killed and recorded as such, so the loop always ends.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

from . import register

# A raw client stops writing this long before its lease could end by its own reckoning.
RAW_MARGIN = 1.0
# Beyond what a call may wait, how long a client lets it run before killing it: far more than
# any fault of the campaign lasts, so a call killed for it is a call that would never answer.
CALL_BUDGET = 120.0

# What a `run` client takes each time: (resources, mode, weight).
RUN_CHOICES = [
    (["excl"], "exclusive", 3),
    (["rw"], "exclusive", 1),
    (["rw"], "shared", 2),
    (["sem"], "limit:2", 2),
    (["set-a", "set-b"], "exclusive", 2),
    (["set-a"], "exclusive", 1),
    (["set-b"], "exclusive", 1),
]
RAW_CHOICES = [(["raw"], "exclusive", 3), (["excl"], "exclusive", 1), (["set-a"], "exclusive", 1)]
WAITER_CHOICES = [
    (["excl"], "exclusive", 2),
    (["rw"], "exclusive", 1),
    (["rw"], "shared", 1),
    (["sem"], "limit:2", 1),
    (["raw"], "exclusive", 1),
    (["set-b"], "exclusive", 1),
]


def mode_flags(mode):
    if mode == "shared":
        return ["--shared"]
    if mode.startswith("limit:"):
        return ["--limit", mode.split(":", 1)[1]]
    return []


def pick(rng, choices):
    total = sum(weight for *_, weight in choices)
    x = rng.uniform(0, total)
    for *choice, weight in choices:
        x -= weight
        if x <= 0:
            return choice
    return choices[-1][:-1]


def millis(seconds):
    return f"{round(seconds * 1000)}ms"


class Client:
    def __init__(self, config, name):
        self.config = config
        self.name = name
        self.me = config["clients"][name]
        self.rng = random.Random(f"{config['seed']}/{name}")
        self.store = self.me["store"]
        self.db = self.me["db"]
        self.bin = config["bin"]
        folder = config["folder"]
        self.calls_file = os.path.join(folder, "clients", f"{name}.calls.jsonl")
        self.sections_file = os.path.join(folder, "clients", f"{name}.sections.jsonl")
        self.register = os.path.join(folder, "register", self.store)
        self.section_script = os.path.join(config["lib"], "section.py")
        # Nothing of the runner's own distlock settings reaches the commands.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DISTLOCK_")}
        if self.me.get("faketime"):
            self.env.update(
                LD_PRELOAD=config["libfaketime"],
                FAKETIME_TIMESTAMP_FILE=self.me["faketime"],
                FAKETIME_NO_CACHE="1",
                FAKETIME_DONT_FAKE_MONOTONIC="1",
            )

    def distlock(self, *args):
        return [self.bin, "--db", self.db, *args]

    def call(self, op, argv, *, owner, resources, mode, ttl, wait, budget, interrupt=None):
        """Runs one distlock command and records it; returns the record and its parsed answer."""
        start = time.time()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
        )
        interrupted = None
        timed_out = False
        try:
            if interrupt is not None:
                after, signum = interrupt
                try:
                    out, err = proc.communicate(timeout=after)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signum)
                    interrupted = int(signum)
                    out, err = proc.communicate(timeout=budget)
            else:
                out, err = proc.communicate(timeout=budget)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            timed_out = True
        end = time.time()
        answer = None
        lines = [line for line in out.decode(errors="replace").splitlines() if line.strip()]
        if lines:
            try:
                answer = json.loads(lines[-1])
            except ValueError:
                answer = None
        granted = {}
        if op == "acquire" and proc.returncode == 0 and isinstance(answer, dict):
            for lock in answer.get("locks") or [answer.get("lock") or {}]:
                if "resource" in lock:
                    granted[lock["resource"]] = lock["fence"]
        code = None if timed_out else proc.returncode
        record = {
            "client": self.name,
            "op": op,
            "owner": owner,
            "store": self.store,
            "resources": resources,
            "mode": mode,
            "ttl": ttl,
            "wait": wait,
            "start": start,
            "end": end,
            "exit": code,
            "timed_out": timed_out,
            "granted": granted,
            "interrupted": interrupted,
        }
        if code not in (0, 75):
            record["stderr"] = err.decode(errors="replace")[-600:]
        register.append_line(self.calls_file, record)
        return record

    def section_event(self, event, owner, at=None, **more):
        register.append_line(
            self.sections_file,
            {"ev": event, "owner": owner, "t": at or time.time(), "client": self.name, **more},
        )

    def do_run(self, n):
        resources, mode = pick(self.rng, RUN_CHOICES)
        ttl = self.rng.choice([3, 4, 6])
        wait = self.rng.choice([0, 1, 3, 8])
        pauses = [round(self.rng.uniform(0.05, 0.5), 3) for _ in range(self.rng.randint(2, 4))]
        if self.rng.random() < 0.1:
            # Now and then a section longer than its lease: only renewals keep it.
            pauses[self.rng.randrange(len(pauses))] = round(self.rng.uniform(ttl, 2 * ttl), 3)
        owner = f"{self.name}.{n}"
        command = [
            "env",
            "-u",
            "LD_PRELOAD",
            "-u",
            "FAKETIME_TIMESTAMP_FILE",
            self.config["python"],
            "-S",
            self.section_script,
            self.name,
            self.store,
            mode,
            self.sections_file,
            self.register,
            ",".join(str(p) for p in pauses),
        ]
        argv = self.distlock("run")
        for resource in resources:
            argv += ["--resource", resource]
        argv += ["--owner", owner, "--ttl", f"{ttl}s", "--wait", f"{wait}s", "--kill-after", "1s"]
        argv += [*mode_flags(mode), "--", *command]
        self.call(
            "run",
            argv,
            owner=owner,
            resources=resources,
            mode=mode,
            ttl=ttl,
            wait=wait,
            budget=wait + sum(pauses) + CALL_BUDGET,
        )

    def hold(self, owner, resources, mode, fences, ttl, granted_at, steps, renew):
        """A raw holder's critical section: operates on the register while its own deadline
        allows, renewing when `renew` says, then releases.

        The section ends when the holder stops acting: at once when it is done, or, when its
        deadline passed meanwhile (a renewal that failed or took too long, or the holder
        stopped), at that deadline, after which it did nothing (its register operations, each
        checked against the deadline first, are recorded with their own times)."""
        deadline = granted_at + ttl - RAW_MARGIN
        op = "write" if mode == "exclusive" else "read"
        started = False
        reason = "done"
        for i, pause in enumerate(steps):
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                reason = "lease"
                break
            if not started:
                self.section_event("start", owner, store=self.store, mode=mode, fences=fences)
                started = True
            for resource in resources:
                register.apply(self.register, resource, fences[resource], op, owner, self.name)
            if renew[i]:
                sent = time.monotonic()
                record = self.call(
                    "renew",
                    self.distlock("renew", *resources, "--owner", owner, "--ttl", f"{ttl}s"),
                    owner=owner,
                    resources=resources,
                    mode=mode,
                    ttl=ttl,
                    wait=0,
                    budget=CALL_BUDGET,
                )
                if record["exit"] != 0:
                    reason = "lease"
                    break
                deadline = sent + ttl - RAW_MARGIN
        if started:
            at = time.time()
            if reason == "lease":
                at = min(at, at - (time.monotonic() - deadline))
            self.section_event("end", owner, at=at, reason=reason)
        self.call(
            "release",
            self.distlock("release", *resources, "--owner", owner),
            owner=owner,
            resources=resources,
            mode=mode,
            ttl=ttl,
            wait=0,
            budget=CALL_BUDGET,
        )

    def do_raw(self, n):
        resources, mode = pick(self.rng, RAW_CHOICES)
        ttl = self.rng.choice([3, 4, 6])
        wait = self.rng.choice([0, 0, 2, 5])
        steps = [round(self.rng.uniform(0.05, 0.6), 3) for _ in range(self.rng.randint(1, 4))]
        renew = [self.rng.random() < 0.5 for _ in steps]
        owner = f"{self.name}.{n}"
        sent = time.monotonic()
        record = self.call(
            "acquire",
            self.distlock(*self.acquire_args(resources, owner, ttl, wait, mode)),
            owner=owner,
            resources=resources,
            mode=mode,
            ttl=ttl,
            wait=wait,
            budget=wait + CALL_BUDGET,
        )
        if record["exit"] == 0:
            self.hold(owner, resources, mode, record["granted"], ttl, sent, steps, renew)

    def do_waiter(self, n):
        resources, mode = pick(self.rng, WAITER_CHOICES)
        ttl = 4
        wait = self.rng.choice([0.5, 1, 2, 4])
        interrupt = None
        if self.rng.random() < 0.3:
            signum = self.rng.choice([signal.SIGINT, signal.SIGTERM])
            interrupt = (round(self.rng.uniform(0.05, wait), 3), signum)
        step = round(self.rng.uniform(0.05, 0.3), 3)
        owner = f"{self.name}.{n}"
        sent = time.monotonic()
        record = self.call(
            "acquire",
            self.distlock(*self.acquire_args(resources, owner, ttl, wait, mode)),
            owner=owner,
            resources=resources,
            mode=mode,
            ttl=ttl,
            wait=wait,
            budget=wait + CALL_BUDGET,
            interrupt=interrupt,
        )
        if record["exit"] == 0:
            self.hold(owner, resources, mode, record["granted"], ttl, sent, [step], [False])

    @staticmethod
    def acquire_args(resources, owner, ttl, wait, mode):
        return [
            "acquire",
            *resources,
            "--owner",
            owner,
            "--ttl",
            f"{ttl}s",
            "--wait",
            millis(wait),
            *mode_flags(mode),
        ]

    def loop(self):
        until = self.config["until"]
        work = {"run": self.do_run, "raw": self.do_raw, "waiter": self.do_waiter}[self.me["kind"]]
        n = 0
        while time.time() < until:
            n += 1
            work(n)
            time.sleep(self.rng.uniform(0, 0.3))


def main(argv):
    config_path, name = argv
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    Client(config, name).loop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
