"""The campaign runner: `scripts/chaos --seed S --duration SECONDS [--stores …]`.

It starts what the campaign needs itself, in a folder of its own (`--dir`, else a new one under
the temporary folder):

- the stores: a SQLite file, and a PostgreSQL cluster of its own from `scripts/pg-test-server`
  (its own port and folder, never the shared test server's);
- the ways in (`--stores` names which): `sqlite` (the file), `pg` (PostgreSQL), `pg~`
  (PostgreSQL through a proxy), and with `server`: `srv-sqlite~` (a `distlock serve` over the
  SQLite file, through a proxy), `srv-pg-a` (a server over PostgreSQL) and `srv-pg-b~` (a
  second server over the same database, reached through a proxy and reaching PostgreSQL
  through another);
- the clients (`--clients` per store: `run` loops, raw callers and waiters, each on a way in of
  its store, taken in turn), and the nemesis.

After `--duration` seconds the nemesis heals everything it broke, the clients finish what they
are doing and stop, and the runner waits until every lease could have ended (the longest TTL
and wait, and the 5 s a dead waiter's place lasts); then it records what each store still
holds, reads each store's history directly (`distlock log`, not through a server), stops
everything it started, and runs the checker. It prints the figures (operations, faults by
kind, anomalies by kind, fenced writes, the longest recovery), each anomaly, and last:

    chaos: N operations, M faults, K anomalies (seed S)

Exit: 0 with no anomaly; 1 with anomalies; 2 when the campaign itself failed (a client
crashed, or a fault could not be played or healed); 64 for bad arguments or a binary that
cannot be used. The folder is removed after a clean campaign unless `--keep` is given, and
kept (its path printed) otherwise; `scripts/chaos --check DIR` checks a kept folder again.

Every loop is bounded in count and time: the clients stop at the deadline and kill any call
past a budget, the drain and the settling wait have deadlines, and the campaign stops by
itself. Traffic stays on 127.0.0.1.

The binary: `--bin`, else `DISTLOCK_BIN`, else `target/release/distlock` (`cargo build
--release`). Clock steps need it to see libfaketime's clock, so it must be linked dynamically
(`scripts/build-release` links statically; the runner checks and says so).
"""

import argparse
import glob
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from . import checker, history
from .cluster import Cluster, ClusterError
from .nemesis import MAX_ACTIVE, Nemesis, plan, process_tree, write_offset
from .proxy import Proxy
from .reaper import Reaper
from .servers import Server, ServerError
from .timeline import parse_store_time

SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(SCRIPTS)
# Debian's faketime package, for whichever architecture this is.
LIBFAKETIME = next(
    iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))),
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
)
RESOURCES = ["excl", "rw", "sem", "set-a", "set-b", "raw"]
# The kinds of the clients of a store, in the order they are added.
KIND_CYCLE = ["run", "run", "raw", "run", "waiter", "run", "run", "raw", "waiter", "run"]
# The longest TTL and wait a client asks for (clients.py), and how long a dead waiter's place
# lasts (the contract): after them, nothing a client did may still hold anything.
LONGEST_TTL = 6.0
LONGEST_WAIT = 8.0
WAITER_LIVENESS = 5.0
# How long the clients may take to finish after the deadline: their last call's wait, its
# critical section and release, and a budget past which a call is killed anyway.
DRAIN_TIMEOUT = 240.0
# Ports for the campaign's servers, proxies and PostgreSQL: below Linux's ephemeral range
# (32768 up), so that no outgoing connection takes one while its server restarts.
PORT_RANGE = (22000, 32000)
EXIT_ANOMALIES = 1
EXIT_BROKEN = 2
EXIT_USAGE = 64


class UsageError(Exception):
    pass


def say(line):
    print(line, flush=True)


class Parser(argparse.ArgumentParser):
    """argparse, with distlock's exit code for bad arguments (64) instead of 2."""

    def error(self, message):
        raise UsageError(message)


def parse_args(argv):
    parser = Parser(
        prog="scripts/chaos",
        description="A fault campaign against distlock: clients on every way in, a nemesis, "
        "and a checker over the whole history.",
    )
    parser.add_argument("--seed", type=int, help="what the schedule and the clients' choices "
                        "are drawn from (default: a random one, printed)")
    parser.add_argument("--duration", type=float, default=60.0,
                        help="seconds of clients and faults (default 60)")
    parser.add_argument("--stores", default="sqlite,postgres,server",
                        help="the ways in: sqlite, postgres, server, comma-separated (default all)")
    parser.add_argument("--clients", type=int, default=6,
                        help="clients per store (default 6)")
    parser.add_argument("--bin", help="the distlock binary (default: $DISTLOCK_BIN, else "
                        "target/release/distlock)")
    parser.add_argument("--dir", help="the campaign's folder (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the folder after a clean campaign")
    parser.add_argument("--check", metavar="DIR", help="check the history of a kept campaign "
                        "folder again, and run nothing")
    args = parser.parse_args(argv)
    if args.check:
        if not os.path.exists(os.path.join(args.check, "config.json")):
            raise UsageError(f"{args.check} is not a campaign's folder (no config.json)")
        return args
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = [s for s in stores if s not in ("sqlite", "postgres", "server")]
    if unknown or not stores:
        raise UsageError(f"--stores takes sqlite, postgres and server; not {args.stores!r}")
    args.stores = stores
    if args.dir and os.path.isdir(args.dir) and os.listdir(args.dir):
        raise UsageError(f"--dir {args.dir} is not empty (a campaign needs a folder of its own)")
    if not 10 <= args.duration <= 86400:
        raise UsageError("--duration is 10 to 86400 seconds")
    if not 1 <= args.clients <= 40:
        raise UsageError("--clients is 1 to 40")
    if args.seed is None:
        args.seed = random.SystemRandom().randint(1, 2**31 - 1)
    args.bin = args.bin or os.environ.get("DISTLOCK_BIN") or os.path.join(
        REPO, "target", "release", "distlock"
    )
    if not os.access(args.bin, os.X_OK):
        raise UsageError(f"no distlock binary at {args.bin} (cargo build --release, or --bin PATH)")
    args.bin = os.path.abspath(args.bin)
    return args


def free_port(used):
    rng = random.SystemRandom()
    for _ in range(500):
        port = rng.randint(*PORT_RANGE)
        if port in used:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        used.add(port)
        return port
    raise RuntimeError("no free port found")


def commit():
    def git(*args):
        out = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def check_faketime(bin_path, folder):
    """Whether the binary sees libfaketime's clock: a probe acquire a day ahead on a SQLite
    file of its own must be stamped a day ahead."""
    if not os.path.exists(LIBFAKETIME):
        raise UsageError(f"clock steps need libfaketime ({LIBFAKETIME}: apt-get install faketime)")
    clock = os.path.join(folder, "probe.faketime")
    write_offset(clock, 86400)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTLOCK_")}
    env.update(
        LD_PRELOAD=LIBFAKETIME,
        FAKETIME_TIMESTAMP_FILE=clock,
        FAKETIME_NO_CACHE="1",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
    )
    out = subprocess.run(
        [bin_path, "--db", os.path.join(folder, "probe.db"), "acquire", "probe", "--owner", "p",
         "--ttl", "60"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    try:
        ahead = parse_store_time(json.loads(out.stdout)["lock"]["acquired_at"]) - time.time()
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"the faketime probe failed: {out.stderr.strip()}") from None
    # The probe's store (and its -wal, -shm, -turnstile) and clock.
    for leftover in glob.glob(os.path.join(folder, "probe.*")):
        os.remove(leftover)
    if ahead < 86000:
        raise UsageError(
            f"{bin_path} does not see libfaketime's clock (a statically linked build?): clock "
            "steps need a dynamically linked one (cargo build --release)"
        )


class Campaign:
    """Everything one campaign started, so that all of it is stopped however it ends."""

    def __init__(self, args, folder):
        self.args = args
        self.folder = folder
        self.used_ports = set()
        self.cluster = None
        self.sqlite = None
        self.servers = {}
        self.proxies = {}
        self.ways = {}
        self.pg_ways = []
        self.server_ways = {}
        self.proxy_ways = {}
        self.faketime = {}
        self.clients = {}
        self.procs = {}
        self.nemesis = None
        self.errors = []
        self.started = None
        self.reaper = Reaper(folder)
        self.noting = threading.Lock()

    def note_running(self):
        """Tells the reaper what runs now (see `reaper`)."""
        with self.noting:
            self.reaper.note(
                {
                    "clients": {
                        str(p.pid): "chaos_lib.clients"
                        for p in self.procs.values()
                        if p.poll() is None
                    },
                    "servers": {
                        str(s.proc.pid): "serve"
                        for s in self.servers.values()
                        if s.proc is not None and s.proc.poll() is None
                    },
                    "cluster": None
                    if self.cluster is None
                    else {
                        "script": self.cluster.script,
                        "port": self.cluster.port,
                        "folder": self.cluster.folder,
                    },
                }
            )

    # Set-up.

    def proxy(self, name, upstream_port, ways):
        proxy = Proxy(name, free_port(self.used_ports), upstream_port)
        proxy.start()
        self.proxies[name] = proxy
        self.proxy_ways[name] = ways
        return proxy

    def server(self, name, db, ways):
        server = Server(
            name, self.args.bin, db, free_port(self.used_ports),
            os.path.join(self.folder, "servers", f"{name}.log"),
        )
        self.servers[name] = server
        self.server_ways[name] = ways
        server.start()
        self.note_running()
        return server

    def set_up(self):
        for sub in ("clients", "servers", "stores", "register/sqlite", "register/postgres"):
            os.makedirs(os.path.join(self.folder, sub), exist_ok=True)
        use_sqlite, use_pg = backing(self.args.stores)
        with_servers = "server" in self.args.stores
        if use_sqlite:
            self.sqlite = os.path.join(self.folder, "sqlite", "locks.db")
            os.makedirs(os.path.dirname(self.sqlite), exist_ok=True)
            if "sqlite" in self.args.stores:
                self.ways["sqlite"] = ("sqlite", self.sqlite)
            if with_servers:
                server = self.server("srv-sqlite", self.sqlite, ["srv-sqlite~"])
                proxy = self.proxy("srv-sqlite", server.port, ["srv-sqlite~"])
                self.ways["srv-sqlite~"] = ("sqlite", f"http://127.0.0.1:{proxy.port}")
        if use_pg:
            say("chaos: starting PostgreSQL (scripts/pg-test-server)")
            port = free_port(self.used_ports)
            self.cluster = Cluster(SCRIPTS, os.path.join(self.folder, "pg"), port)
            self.note_running()
            self.cluster.start()
            if "postgres" in self.args.stores:
                self.ways["pg"] = ("postgres", self.cluster.url())
                proxy = self.proxy("pg", self.cluster.port, ["pg~"])
                self.ways["pg~"] = ("postgres", self.cluster.url(proxy.port))
            if with_servers:
                server = self.server("srv-pg-a", self.cluster.url(), ["srv-pg-a"])
                self.ways["srv-pg-a"] = ("postgres", f"http://127.0.0.1:{server.port}")
                to_store = self.proxy("pg-b", self.cluster.port, ["srv-pg-b~"])
                server = self.server("srv-pg-b", self.cluster.url(to_store.port), ["srv-pg-b~"])
                proxy = self.proxy("srv-pg-b", server.port, ["srv-pg-b~"])
                self.ways["srv-pg-b~"] = ("postgres", f"http://127.0.0.1:{proxy.port}")
            self.pg_ways = [w for w, (store, _) in self.ways.items() if store == "postgres"]
        for store in ("sqlite", "postgres"):
            ways = [w for w, (s, _) in self.ways.items() if s == store]
            for i in range(self.args.clients if ways else 0):
                name = f"{'s' if store == 'sqlite' else 'p'}{i + 1:02d}"
                way = ways[i % len(ways)]
                client = {
                    "kind": KIND_CYCLE[i % len(KIND_CYCLE)],
                    "store": store,
                    "way": way,
                    "db": self.ways[way][1],
                    "faketime": None,
                }
                # Clocks are stepped only where the store's or the server's clock decides.
                if way != "sqlite" and i % 3 == 1:
                    path = os.path.join(self.folder, "clients", f"{name}.faketime")
                    write_offset(path, 0)
                    client["faketime"] = path
                    self.faketime[name] = path
                self.clients[name] = client

    def targets(self):
        return {
            "pg-restart": ["postgres"] if self.cluster else [],
            "pg-stop": ["postgres"] if self.cluster else [],
            "pg-terminate": ["postgres"] if self.cluster else [],
            "server-kill": sorted(self.servers),
            "server-pause": sorted(self.servers),
            "client-pause": sorted(self.clients),
            "client-kill": sorted(self.clients),
            "partition-hold": sorted(self.proxies),
            "partition-delay": sorted(self.proxies),
            "partition-cut": sorted(self.proxies),
            "clock-step": sorted(self.faketime),
        }

    def client_pid(self, name):
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return None
        return proc.pid

    # The campaign.

    def run(self):
        args = self.args
        schedule = plan(random.Random(f"{args.seed}/nemesis"), args.duration, self.targets())
        self.started = time.time()
        config = {
            "seed": args.seed,
            "duration": args.duration,
            "stores": args.stores,
            "started": self.started,
            "until": self.started + args.duration,
            "bin": args.bin,
            "python": sys.executable,
            "lib": os.path.join(SCRIPTS, "chaos_lib"),
            "libfaketime": LIBFAKETIME,
            "folder": self.folder,
            "clients": self.clients,
            "ways": {w: {"store": s, "db": db} for w, (s, db) in self.ways.items()},
            "schedule": schedule,
        }
        config_path = os.path.join(self.folder, "config.json")
        with open(config_path, "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1)
        env = {**os.environ, "PYTHONPATH": SCRIPTS, "PYTHONDONTWRITEBYTECODE": "1"}
        for name in self.clients:
            with open(os.path.join(self.folder, "clients", f"{name}.log"), "ab") as log:
                self.procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "chaos_lib.clients", config_path, name],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                    start_new_session=True,
                )
        self.note_running()
        record = os.path.join(self.folder, "nemesis.jsonl")
        self.nemesis = Nemesis(schedule, self, record, self.started)
        self.nemesis.start()
        say(f"chaos: {len(self.clients)} clients on {', '.join(self.ways)}; "
            f"{len(schedule)} faults planned over {args.duration:g} s")
        until = config["until"]
        next_note = self.started + 60
        while time.time() < until:
            time.sleep(min(1.0, max(0.0, until - time.time())))
            if time.time() >= next_note and time.time() < until:
                elapsed = time.time() - self.started
                say(f"chaos: {elapsed:.0f} s, {self.nemesis.count} faults so far")
                next_note += 60
        self.nemesis.stop()
        self.errors.extend(self.nemesis.errors)
        say(f"chaos: deadline reached, faults healed; waiting for the clients to finish")
        self.drain()
        self.settle()
        self.read_histories()

    def drain(self):
        deadline = time.monotonic() + DRAIN_TIMEOUT
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.errors.append(f"client {name} did not stop within {DRAIN_TIMEOUT:g} s")
                kill_tree(proc.pid)
                proc.wait(timeout=30)
            if proc.returncode not in (0, None):
                self.errors.append(
                    f"client {name} exited {proc.returncode} (see clients/{name}.log)"
                )

    def stores(self):
        """Each store as distlock reaches it directly."""
        found = {}
        if self.sqlite:
            found["sqlite"] = self.sqlite
        if self.cluster:
            found["postgres"] = self.cluster.url()
        return found

    def distlock(self, db, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("DISTLOCK_")}
        return subprocess.run(
            [self.args.bin, "--db", db, *args], capture_output=True, text=True, env=env, timeout=120
        )

    def final_state(self):
        state = {}
        for store, db in self.stores().items():
            out = self.distlock(db, "list")
            live = json.loads(out.stdout)["locks"] if out.returncode == 0 else []
            if out.returncode != 0:
                self.errors.append(f"distlock list on {store}: {out.stderr.strip()}")
            waiting = {}
            for resource in RESOURCES:
                status = self.distlock(db, "status", resource)
                try:
                    waiting[resource] = json.loads(status.stdout).get("waiting", 0)
                except ValueError:
                    waiting[resource] = 0
            state[store] = {"live": live, "waiting": waiting}
        return state

    def settle(self):
        """Waits until every lease a client may have left could have ended, and records what
        each store still holds then (nothing, if all is well)."""
        deadline = time.time() + LONGEST_TTL + LONGEST_WAIT + WAITER_LIVENESS + 5
        while True:
            state = self.final_state()
            empty = all(
                not s["live"] and not any(s["waiting"].values()) for s in state.values()
            )
            if empty or time.time() >= deadline:
                break
            time.sleep(1.0)
        with open(os.path.join(self.folder, "final.json"), "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1)

    def read_histories(self):
        for store, db in self.stores().items():
            out = self.distlock(db, "log")
            if out.returncode != 0:
                self.errors.append(f"distlock log on {store}: {out.stderr.strip()}")
            path = os.path.join(self.folder, "stores", f"{store}.log.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                f.write(out.stdout)

    # Tear-down: whatever happened before.

    def tear_down(self):
        if self.nemesis is not None:
            self.nemesis.stop()
        for proc in self.procs.values():
            if proc.poll() is None:
                kill_tree(proc.pid)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
        for server in self.servers.values():
            server.stop()
        for proxy in self.proxies.values():
            proxy.close()
        if self.cluster is not None:
            try:
                shutil.copy(self.cluster.log, os.path.join(self.folder, "postgres.log"))
            except OSError:
                pass
            self.cluster.teardown()
        self.reaper.done()


def kill_tree(pid):
    """SIGKILL to every process group of `pid`'s tree, continued first in case it is stopped."""
    groups = set()
    for member in process_tree(pid):
        try:
            groups.add(os.getpgid(member))
        except ProcessLookupError:
            pass
    for group in groups:
        for signum in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.killpg(group, signum)
            except ProcessLookupError:
                pass


def report(h, errors):
    """Checks `h`, prints the figures and every anomaly; returns the exit code, the figures,
    and the campaign's last line (printed by the caller, last)."""
    anomalies = checker.check(h)
    figures = checker.figures(h, anomalies)
    exits = figures["exits"]
    say(
        f"operations: {figures['operations']} — "
        + "; ".join(
            f"{op} {count} (exit "
            + ", ".join(f"{code}: {n}" for code, n in sorted(exits[op].items(), key=str))
            + ")"
            for op, count in sorted(figures["by_op"].items())
        )
    )
    writes = figures["writes"]
    say(
        f"critical sections: {figures['sections']}; fenced writes: "
        f"{writes.get('accepted', 0)} accepted, {writes.get('refused', 0)} refused by their fence"
    )
    skipped = h.get("skipped")
    busy = f" ({skipped} planned, skipped: target busy or {MAX_ACTIVE} under way)"
    say(
        f"faults: {figures['faults']} — "
        + ", ".join(f"{kind} {n}" for kind, n in sorted(figures["faults_by_kind"].items()))
        + (busy if skipped else "")
    )
    say(
        f"anomalies: {figures['anomalies']} — "
        + ", ".join(f"{kind} {n}" for kind, n in figures["anomalies_by_kind"].items())
    )
    longest = figures["longest_recovery"]
    if longest:
        say(
            f"longest recovery: {longest['seconds']:.3f} s after {longest['kind']} of "
            f"{longest['target']} (store back at +{longest['at']:.1f} s -> first grant; "
            f"{figures['recoveries']} recoveries measured)"
        )
        say(
            "recovery by fault, longest (median): "
            + ", ".join(
                f"{kind} {r['longest']:.2f} s ({r['median']:.2f} s)"
                for kind, r in figures["recoveries_by_kind"].items()
            )
        )
    else:
        say("longest recovery: none measured")
    if h.get("unreadable"):
        say(f"unreadable history lines: {h['unreadable']}")
    for anomaly in anomalies[:100]:
        say(f"ANOMALY {anomaly.kind}: {anomaly.detail}")
    if len(anomalies) > 100:
        say(f"... and {len(anomalies) - 100} more")
    for error in errors:
        say(f"chaos: campaign error: {error}")
    last = (
        f"chaos: {figures['operations']} operations, {figures['faults']} faults, "
        f"{figures['anomalies']} anomalies (seed {h.get('seed')})"
    )
    if anomalies:
        return EXIT_ANOMALIES, figures, last
    return (EXIT_BROKEN if errors else 0), figures, last


def interrupted(_signum, _frame):
    """SIGTERM ends a campaign as ^C does: everything it started is stopped."""
    raise KeyboardInterrupt


def backing(stores):
    """Which stores a campaign uses: those `--stores` names, and both when it names only
    `server` (the servers run over every store used)."""
    used = {s for s in stores if s in ("sqlite", "postgres")} or {"sqlite", "postgres"}
    return "sqlite" in used, "postgres" in used


def fakes_clocks(stores):
    """Whether a campaign has clients whose clock may be stepped: every way in but the SQLite
    file has a store or a server whose clock decides."""
    return "postgres" in stores or "server" in stores


def main(argv):
    try:
        args = parse_args(argv)
    except UsageError as err:
        print(f"chaos: {err}", file=sys.stderr)
        return EXIT_USAGE
    if args.check:
        h = history.load(args.check)
        code, _, last = report(h, [])
        say(last)
        return code
    folder = os.path.abspath(args.dir) if args.dir else tempfile.mkdtemp(prefix="distlock-chaos-")
    os.makedirs(folder, exist_ok=True)
    # PostgreSQL's own user must reach the cluster's folder inside this one.
    os.chmod(folder, 0o755)
    version = subprocess.run([args.bin, "--version"], capture_output=True, text=True).stdout.strip()
    say(
        f"chaos: seed {args.seed}, {args.duration:g} s, stores {','.join(args.stores)}, "
        f"{args.clients} clients per store; {version} at commit {commit()}; folder {folder}"
    )
    campaign = Campaign(args, folder)
    signal.signal(signal.SIGTERM, interrupted)
    try:
        if fakes_clocks(args.stores):
            check_faketime(args.bin, folder)
        campaign.set_up()
        campaign.run()
    except UsageError as err:
        campaign.tear_down()
        print(f"chaos: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        campaign.tear_down()
        print(f"chaos: interrupted (folder {folder})", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - whatever broke, everything started is stopped
        campaign.tear_down()
        what = err if isinstance(err, (ClusterError, ServerError)) else repr(err)
        print(f"chaos: the campaign could not run: {what} (folder {folder})", file=sys.stderr)
        return EXIT_BROKEN
    campaign.tear_down()
    h = history.load(folder)
    h["skipped"] = campaign.nemesis.skipped if campaign.nemesis else 0
    code, figures, last = report(h, campaign.errors)
    summary = {
        "seed": args.seed,
        "duration": args.duration,
        "stores": args.stores,
        "clients": args.clients,
        "commit": commit(),
        "version": version,
        "errors": campaign.errors,
        "skipped_faults": h["skipped"],
        **figures,
    }
    with open(os.path.join(folder, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    if code == 0 and not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        say(f"chaos: history kept in {folder} (scripts/chaos --check {folder} checks it again)")
    say(last)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
