"""The nemesis: a fault schedule drawn from the seed, and the faults themselves.

`plan` draws the whole schedule before the campaign starts: at what second each fault begins,
its kind, its target, how long it lasts and how (`fast` or `immediate` shutdown, the delay of a
slow network, the offset of a clock). Faults overlap, as real ones do; a fault whose target is
still under an earlier fault, or that would make more than `MAX_ACTIVE` at once, is skipped and
counted as such, so the same seed plays the same schedule.

| kind | what it does | an outage of |
| --- | --- | --- |
| `pg-restart` | `pg_ctl restart -m fast` or `-m immediate` (a crash and its recovery) | every PostgreSQL way in |
| `pg-stop` | `pg_ctl stop -m fast` or `immediate`, 1-6 s down, `pg_ctl start` | every PostgreSQL way in |
| `pg-terminate` | `pg_terminate_backend` of every distlock session | every PostgreSQL way in (a moment) |
| `server-kill` | SIGKILL of a `distlock serve`, 0-3 s down, started again on its port | the ways through it |
| `server-pause` | SIGSTOP of a server for 0.5-8 s, then SIGCONT | the ways through it |
| `client-pause` | SIGSTOP of a client whole (every process group of its tree: the guard's and the command's) for 0.2-12 s, then SIGCONT | that client |
| `client-kill` | SIGKILL of the distlock process a client is running (a `run`'s guard, whose command dies with it, or an `acquire`) | - |
| `partition-hold` | a proxy holds every byte for 1-8 s | the ways through it |
| `partition-delay` | a proxy delays every chunk by 0.05-1 s for 1-8 s | the ways through it |
| `partition-cut` | a proxy resets its connections and refuses new ones for 0.5-5 s | the ways through it |
| `clock-step` | a client of PostgreSQL or of a server has its wall clock stepped by up to 2 h either way for 2-30 s (libfaketime) | - |

Stopping a client: the nemesis stops every process group of its tree, the client's own (the loop
and `run`'s guard) first, then the command's; it continues them in the other order. A guard
stopped alone would leave its command unguarded, which the book's Guarantees and limits
documents as the one thing `run` cannot prevent; and a guard continued while its command is
still stopped would see a job-control stop. Stopping both, as SIGSTOP to a whole job does, is
the fault the contract covers.

Each fault is recorded in `nemesis.jsonl` when it ends, with when it started and ended, the ways
in it made unavailable and the clients it stopped: the checker allows for them, and the
figures measure recovery from them.
"""

import os
import signal
import threading
import time

from .register import append_line

MAX_ACTIVE = 3

# kind -> weight in the schedule.
WEIGHTS = {
    "pg-restart": 2,
    "pg-stop": 2,
    "pg-terminate": 2,
    "server-kill": 3,
    "server-pause": 2,
    "client-pause": 4,
    "client-kill": 2,
    "partition-hold": 2,
    "partition-delay": 2,
    "partition-cut": 2,
    "clock-step": 2,
}
# Faults after which the figures measure recovery (store back -> first grant).
RECOVERY = {
    "pg-restart",
    "pg-stop",
    "pg-terminate",
    "server-kill",
    "server-pause",
    "partition-hold",
    "partition-cut",
}


def plan(rng, duration, targets):
    """The schedule of a campaign of `duration` seconds: a list of faults, each a dict with
    "at" (seconds from the start), "kind", "target", "hold" (seconds) and the kind's own
    settings. `targets` maps each kind to what it may hit (kinds with none are left out)."""
    kinds = [k for k in WEIGHTS if targets.get(k)]
    schedule = []
    if not kinds:
        return schedule
    at = rng.uniform(1.0, 3.0)
    while at < duration - 5.0:
        total = sum(WEIGHTS[k] for k in kinds)
        x = rng.uniform(0, total)
        kind = kinds[-1]
        for k in kinds:
            x -= WEIGHTS[k]
            if x <= 0:
                kind = k
                break
        fault = {"at": round(at, 3), "kind": kind, "target": rng.choice(targets[kind])}
        fault.update(settings(rng, kind))
        schedule.append(fault)
        at += rng.uniform(0.5, 4.0)
    return schedule


def settings(rng, kind):
    if kind == "pg-restart":
        return {"mode": rng.choice(["fast", "immediate"]), "hold": 0.0}
    if kind == "pg-stop":
        return {"mode": rng.choice(["fast", "immediate"]), "hold": round(rng.uniform(1, 6), 3)}
    if kind == "server-kill":
        return {"hold": round(rng.uniform(0, 3), 3)}
    if kind == "server-pause":
        return {"hold": round(rng.uniform(0.5, 8), 3)}
    if kind == "client-pause":
        return {"hold": round(rng.uniform(0.2, 12), 3)}
    if kind in ("partition-hold", "partition-delay"):
        return {"hold": round(rng.uniform(1, 8), 3), "delay": round(rng.uniform(0.05, 1.0), 3)}
    if kind == "partition-cut":
        return {"hold": round(rng.uniform(0.5, 5), 3)}
    if kind == "clock-step":
        offset = rng.randint(30, 7200) * rng.choice([-1, 1])
        return {"hold": round(rng.uniform(2, 30), 3), "offset": offset}
    return {"hold": 0.0}


def process_tree(root):
    """`root` and every process descended from it, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the fields follow the last ")".
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def command_name(pid):
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


class Nemesis:
    """Plays a schedule against the campaign's parts, each fault in a thread of its own."""

    def __init__(self, schedule, parts, record, started):
        self.schedule = schedule
        self.parts = parts
        self.record = record
        self.started = started
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.busy = set()
        self.threads = []
        self.skipped = 0
        self.errors = []
        self.count = 0
        self.thread = threading.Thread(target=self.play, name="nemesis", daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        """Stops scheduling, heals every fault under way, and waits for them."""
        self.stopping.set()
        self.thread.join(timeout=120)
        for thread in list(self.threads):
            thread.join(timeout=180)

    def play(self):
        for n, fault in enumerate(self.schedule):
            delay = self.started + fault["at"] - time.time()
            if delay > 0 and self.stopping.wait(delay):
                return
            if self.stopping.is_set():
                return
            key = self.key(fault)
            with self.lock:
                if key in self.busy or len(self.busy) >= MAX_ACTIVE:
                    self.skipped += 1
                    continue
                self.busy.add(key)
            thread = threading.Thread(target=self.apply, args=(n, fault, key), daemon=True)
            self.threads.append(thread)
            thread.start()

    @staticmethod
    def key(fault):
        """What a fault occupies: PostgreSQL is one target for every fault of its own."""
        kind = fault["kind"]
        if kind.startswith("pg-"):
            return "postgres"
        if kind.startswith("client-"):
            return f"client:{fault['target']}"
        return f"{kind.split('-')[0]}:{fault['target']}"

    def hold(self, seconds):
        """Waits while the fault lasts; returns early when the campaign stops."""
        self.stopping.wait(seconds)

    def apply(self, n, fault, key):
        kind = fault["kind"]
        entry = {
            "id": n,
            "kind": kind,
            "target": fault["target"],
            "planned_at": fault["at"],
            "ways": [],
            "clients": [],
            "outage": False,
            "recovery": kind in RECOVERY,
            "settings": {k: v for k, v in fault.items() if k not in ("at", "kind", "target")},
        }
        entry["start"] = time.time()
        try:
            getattr(self, "do_" + kind.replace("-", "_"))(fault, entry)
        except Exception as err:  # noqa: BLE001 - recorded, and the campaign fails on it
            entry["error"] = f"{type(err).__name__}: {err}"
            self.errors.append(f"{kind} on {fault['target']}: {entry['error']}")
        entry["end"] = time.time()
        if entry.pop("skip", False):
            with self.lock:
                self.skipped += 1
        else:
            with self.lock:
                self.count += 1
            append_line(self.record, entry)
        with self.lock:
            self.busy.discard(key)

    # PostgreSQL.

    def pg_entry(self, entry):
        entry["ways"] = list(self.parts.pg_ways)
        entry["outage"] = True

    def do_pg_restart(self, fault, entry):
        self.pg_entry(entry)
        self.parts.cluster.restart(fault["mode"])

    def do_pg_stop(self, fault, entry):
        self.pg_entry(entry)
        try:
            self.parts.cluster.stop(fault["mode"])
            self.hold(fault["hold"])
        finally:
            self.parts.cluster.start_server()

    def do_pg_terminate(self, fault, entry):
        self.pg_entry(entry)
        entry["terminated"] = self.parts.cluster.terminate_sessions()

    # Servers.

    def do_server_kill(self, fault, entry):
        server = self.parts.servers[fault["target"]]
        entry["ways"] = list(self.parts.server_ways[fault["target"]])
        entry["outage"] = True
        server.kill()
        self.hold(fault["hold"])
        server.start()
        self.parts.note_running()

    def do_server_pause(self, fault, entry):
        server = self.parts.servers[fault["target"]]
        entry["ways"] = list(self.parts.server_ways[fault["target"]])
        entry["outage"] = True
        server.signal(signal.SIGSTOP)
        try:
            self.hold(fault["hold"])
        finally:
            server.signal(signal.SIGCONT)

    # Clients.

    def do_client_pause(self, fault, entry):
        pid = self.parts.client_pid(fault["target"])
        if pid is None:
            entry["skip"] = True
            return
        entry["clients"] = [fault["target"]]
        entry["outage"] = True
        groups = []
        try:
            # Three passes: a process forked while the first groups were being stopped is
            # caught by the next.
            for _ in range(3):
                for member in process_tree(pid):
                    try:
                        group = os.getpgid(member)
                    except ProcessLookupError:
                        continue
                    if group not in groups:
                        try:
                            os.killpg(group, signal.SIGSTOP)
                            groups.append(group)
                        except ProcessLookupError:
                            pass
            entry["groups"] = len(groups)
            self.hold(fault["hold"])
        finally:
            for group in reversed(groups):
                try:
                    os.killpg(group, signal.SIGCONT)
                except ProcessLookupError:
                    pass

    def do_client_kill(self, fault, entry):
        pid = self.parts.client_pid(fault["target"])
        victims = []
        if pid is not None:
            victims = [
                p for p in process_tree(pid)[1:] if command_name(p) == "distlock"
            ]
        if not victims:
            entry["skip"] = True
            return
        entry["clients"] = [fault["target"]]
        for victim in victims:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        entry["killed"] = len(victims)

    # Networks.

    def partition(self, fault, entry, mode):
        proxy = self.parts.proxies[fault["target"]]
        entry["ways"] = list(self.parts.proxy_ways[fault["target"]])
        entry["outage"] = True
        proxy.set_mode(mode, fault.get("delay", 0.0))
        try:
            self.hold(fault["hold"])
        finally:
            proxy.set_mode("forward")

    def do_partition_hold(self, fault, entry):
        self.partition(fault, entry, "hold")

    def do_partition_delay(self, fault, entry):
        self.partition(fault, entry, "delay")

    def do_partition_cut(self, fault, entry):
        self.partition(fault, entry, "cut")

    # Clocks.

    def do_clock_step(self, fault, entry):
        path = self.parts.faketime[fault["target"]]
        entry["clients"] = [fault["target"]]
        write_offset(path, fault["offset"])
        try:
            self.hold(fault["hold"])
        finally:
            write_offset(path, 0)


def write_offset(path, seconds):
    """Sets a faked clock's offset for libfaketime, whole: a reader never sees half a file."""
    with open(path + ".new", "w", encoding="utf-8") as f:
        f.write(f"{seconds:+d}\n")
    os.replace(path + ".new", path)
