#!/usr/bin/env python3
"""Locks through a lock server (`distlock serve`), with Python's standard library alone.

As a module, next to your code:

    from distlock_client import lock
    with lock("deploy/prod", owner="deployer@web-1", ttl=30, wait=600) as held:
        for step in steps:
            held.check()  # raises Lost once the lease can no longer be counted on
            step(fence=held.fence)

The lock is taken on entry (waiting in line up to `wait` seconds), renewed every ttl/3 on a
thread while the body runs, and released with its fence however the body ends. Taking it
raises Busy (still held when the wait ran out), Refused (401 or 403: the token, or a resource
outside its prefixes) or LockError (the server unreachable, another answer); leaving it
raises Lost if the lease was lost meanwhile.

The tenure is this block's alone, as one `distlock run` takes ("guarded"): while it lives,
another block or command with the same owner (two processes of one host, a second run of one
job) waits in line or is Busy as another owner's would be. Only a tenure that a plain acquire
took for the owner (`distlock acquire --owner deployer@web-1` in a deploy script) is joined:
the block then leaves it held for its taker to release.

The lease rule (distlock's book, "The lease rule, for every client"), as `Held` keeps it. The
deadline is when the last renewal that succeeded (or the request that got the lock) was sent, on
the monotonic clock, + ttl - margin(ttl); the server counts the lease from when that request
reached it, a little later. The lease is lost when a renewal is answered 404 or 403 (it expired,
was broken, or is another's) or 401 (the token was taken away), or when none has succeeded by
the deadline - grace(ttl): no renewal is sent with a timeout past that point. Then `held.lost`
is set, `on_lost` is called, `held.check()` raises Lost, and so does leaving the block. Python
cannot stop the body from outside: a long body stops itself by the deadline (`held.deadline`),
calling `held.check()` between its steps, waiting on `held.lost`, or stopping what it started in
`on_lost`. `run(held, command)` runs a command that way. The release is sent again while it is
answered 503 (the server's store is away) or not at all, until the lease's end.

As a command, which runs CMD under the lock with the fence in DISTLOCK_FENCE and exits with
its status (75: still busy; 77: refused; 74: unreachable; 124: the lease was lost, CMD stopped):

    distlock_client.py deploy/prod --ttl 30 --wait 600 -- ./deploy.sh

The owner is HOST:PID unless --owner names one; either way two commands never hold the lock
at once. The command keeps the rule as `distlock run` does: CMD runs in a session of its own,
which gets SIGTERM when the lease is lost and SIGKILL grace(ttl) later, by the deadline at the
latest. Every signal the client can catch is passed on to CMD's process group (INT, TERM, HUP,
QUIT, USR1, ALRM, ...), and the client renews until CMD exits. ^Z (TSTP, TTIN, TTOU) stops CMD, then
the client; continued (SIGCONT), the client continues CMD while its lease surely lasts, or else
stops it (124), SIGKILLed before it runs again if the lease may be another's already. A client
killed with SIGKILL takes CMD with it (Linux: the parent-death signal). Stopping the client
alone with SIGSTOP, which no program can catch, is the one way to leave CMD unguarded: stop the
whole job instead (^Z, or SIGTSTP to the client).

DISTLOCK_URL names the server (default http://127.0.0.1:7878), DISTLOCK_TOKEN its token (sent
in a header, never printed), DISTLOCK_CA_CERT a CA file to check an https:// server against.
"""

import argparse
import ctypes
import json
import math
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

# A waiting request is answered within 30 s; the socket waits a little longer.
TIMEOUT = 60
# Any other request: the longest it may take, when the lease leaves that much time.
CALL_TIMEOUT = 10


def margin(ttl):
    """How long before the lease's end, as this host counts it, the work must be gone: a tenth
    of the lease, as `distlock run`, for the two clocks' rates and a kill to take effect, and
    at least half a second, for an interpreter that a busy host schedules late."""
    return max(ttl / 10, 0.5)


def grace(ttl):
    """From SIGTERM to SIGKILL, and so from the moment a lease that renewals cannot reach is
    given up to the deadline: a quarter of the lease, 5 s at most, as `distlock run` allows."""
    return min(ttl / 4, 5.0)


class LockError(Exception):
    """The lock could not be taken, kept or given back."""


class Busy(LockError):
    """Another owner still held the lock when the wait ran out."""


class Refused(LockError):
    """The server refused the token (401) or the request's resource (403)."""


class Lost(LockError):
    """The lease ended, or may have, while the body ran."""


class Client:
    """One lock server, its token and CA."""

    def __init__(self, url=None, token=None, ca_cert=None):
        self.url = (url or os.environ.get("DISTLOCK_URL") or "http://127.0.0.1:7878").rstrip("/")
        self._token = token or os.environ.get("DISTLOCK_TOKEN")
        ca_cert = ca_cert or os.environ.get("DISTLOCK_CA_CERT")
        self._tls = ssl.create_default_context(cafile=ca_cert) if ca_cert else None

    def __repr__(self):
        return f"Client({self.url!r})"

    def call(self, method, path, body, timeout=CALL_TIMEOUT):
        """Sends one request, each step of it (connecting, sending, each read) given up after
        `timeout` seconds; returns its status, its JSON answer (None for none) and its
        headers."""
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        if self._token:
            request.add_header("Authorization", "Bearer " + self._token)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self._tls) as answer:
                status, text, headers = answer.status, answer.read(), answer.headers
        except urllib.error.HTTPError as error:
            status, text, headers = error.code, error.read(), error.headers
        except OSError as error:  # URLError, a refused connection, a timeout
            raise LockError(f"{method} {self.url}{path}: {getattr(error, 'reason', error)}") from None
        try:
            return status, json.loads(text) if text else None, headers
        except ValueError:
            raise LockError(f"{method} {self.url}{path}: {status}, not JSON") from None

    def acquire(self, resource, owner, ttl, wait=0, guarded=False):
        """Takes `resource` for `owner` with a lease of `ttl` seconds, waiting in line up to
        `wait` seconds. A `guarded` tenure is the caller's alone, as `distlock run` takes
        one: while it lives, an acquire with the same owner waits or is busy as another
        owner's would be (else that owner re-acquires the lock it holds). Returns the lock
        (its "fence", "expires_at", ...); when its lease began at the earliest, on
        time.monotonic(): when the request that got it was sent, plus what the server says
        it waited (Distlock-Waited-Ms) before it granted it; and whether it joined a tenure
        of the owner's that a plain acquire took (Distlock-Grant: extended), which is then
        that acquire's to release."""
        deadline = time.monotonic() + wait
        while True:
            left = max(0, math.ceil(deadline - time.monotonic()))
            body = {"owner": owner, "ttl_seconds": ttl, "wait_seconds": left}
            if guarded:
                body["guarded"] = True
            sent = time.monotonic()
            status, answer, headers = self._wait_in_line(resource, owner, body)
            if status == 429:
                # Too many requests wait on the server (its --max-waiters bounds): ask again
                # after the pause it names, while the wait lasts; then it is busy, as for
                # `distlock acquire --wait`.
                left = deadline - time.monotonic()
                if left <= 0:
                    error = Busy(f"{resource}: the server has too many waiting requests "
                                 f"(waited {wait} s)")
                    error.answer = answer
                    raise error
                try:
                    pause = float(headers.get("Retry-After") or 1)
                except ValueError:
                    pause = 1
                time.sleep(min(max(pause, 0.05), left))
                continue
            if status != 200:
                raise problem(f"acquire {resource}", status, answer)
            if answer["acquired"]:
                waited = int(headers.get("Distlock-Waited-Ms") or 0) / 1000
                joined = (headers.get("Distlock-Grant") or "").strip() == "extended"
                return answer["lock"], sent + waited, joined
            # One request waits up to 30 s, then answers busy with our place in line, which is
            # kept 5 s for the request that posts again with the wait that is left.
            if "position" not in answer or left == 0:
                error = Busy(f"{resource} is held by {holders(answer)} (waited {wait} s)")
                error.answer = answer
                raise error

    def _wait_in_line(self, resource, owner, body):
        """One acquire's POST, on a thread of its own, so that an interrupt (^C; `main` makes
        TERM and HUP one too) does not lose its answer: the queue is left at once
        (`POST .../leave`, which also makes the server answer the waiting request), and a
        grant that answer brings is given back with its fence, as an interrupted `distlock
        run` does. The next in line is not held back for the 5 s the server would otherwise
        keep the place. Best effort, 2 s for each: a server that cannot be told gives the place
        up itself, and a grant whose answer never came ends by its TTL. (Never a release by
        owner alone: another process of the same owner may hold the lock.)"""
        answered = []

        def post():
            try:
                answered.append(self.call("POST", path(resource), body, TIMEOUT))
            except LockError as error:
                answered.append(error)

        poster = threading.Thread(target=post, daemon=True)
        poster.start()
        try:
            poster.join()
        except KeyboardInterrupt:
            try:
                self.call("POST", path(resource) + "/leave", {"owner": owner}, 2)
            except LockError:
                pass
            poster.join(2)
            got = answered[0] if answered else None
            if isinstance(got, tuple) and got[0] == 200 and got[1].get("acquired"):
                try:
                    self.release(resource, owner, got[1]["lock"]["fence"], 2)
                except LockError:
                    pass
            raise
        got = answered[0] if answered else LockError(f"POST {resource}: no answer")
        if isinstance(got, LockError):
            raise got
        return got

    def renew(self, resource, owner, ttl, fence, timeout=CALL_TIMEOUT):
        """Extends the tenure `fence` of `owner` to `ttl` seconds from now."""
        body = {"owner": owner, "ttl_seconds": ttl, "fence": fence}
        status, answer, _ = self.call("POST", path(resource) + "/renew", body, timeout)
        if status != 200:
            raise problem(f"renew {resource}", status, answer, lost=status in (403, 404))
        return answer["lock"]

    def release(self, resource, owner, fence, timeout=CALL_TIMEOUT):
        """Gives back the tenure `fence` of `owner`."""
        body = {"owner": owner, "fence": fence}
        status, answer, _ = self.call("DELETE", path(resource), body, timeout)
        if status not in (200, 204):  # 200: kept until a hold_at_least_seconds runs out
            raise problem(f"release {resource}", status, answer, lost=status in (403, 404))


def path(resource):
    return "/locks/" + urllib.parse.quote(resource, safe="")


def holders(answer):
    found = [answer["holder"]] if "holder" in answer else answer.get("holders", [])
    return ", ".join(h.get("owner", "?") for h in found) or "another owner"


def problem(what, status, answer, lost=False):
    """The exception for a problem document (RFC 9457) the server answered."""
    answer = answer if isinstance(answer, dict) else {}
    text = f"{what}: {status} {answer.get('title', '')}: {answer.get('detail', '')}"
    if status in (401, 403) and answer.get("type") != "forbidden":
        error = Refused(text)  # the token: unknown, or the resource outside its prefixes
    elif lost:
        error = Lost(text)  # the tenure: expired, broken, or another's
    else:
        error = LockError(text)
    error.status, error.answer = status, answer
    return error


class Held:
    """A lock held by a `with` block; see `lock`, and the lease rule above."""

    def __init__(self, client, resource, owner, ttl, wait, on_lost=None):
        self.client, self.resource, self.owner = client, resource, owner
        self.ttl, self.wait = ttl, wait
        self.lock = self.fence = self.why = None
        self.joined = False  # the owner's tenure that a plain acquire took: left held
        self.lost = threading.Event()
        self.on_lost = on_lost  # called once, on a thread of the lock's, when the lease is lost
        self._news = threading.Condition()  # guards what follows; notified when it changes
        self._renewed = None  # time.monotonic() when the last renewal that succeeded was sent
        self._leaving = False
        self._gone = False  # the server said the lease is gone: nothing to release

    @property
    def deadline(self):
        """By when (time.monotonic()) the body must be gone: the lease as last renewed, less
        the margin."""
        with self._news:
            return self._renewed + self.ttl - margin(self.ttl)

    def check(self):
        """Raises Lost once the lease is lost, or once no renewal has succeeded by the stop:
        found here too, not only by the watcher thread, so that a process stopped and
        continued past its lease learns it at its next check, before its next step."""
        if not self.lost.is_set() and time.monotonic() >= self._stop_at():
            self._lose(f"renew {self.resource}: no renewal succeeded in time", gone=False)
        if self.lost.is_set():
            raise self.why

    def resumed(self):
        """Called when this process runs again after it was stopped (^Z), when nothing could
        renew the lease: the lease is lost now unless a renewal could still succeed in time.
        Returns whether it is still held."""
        if time.monotonic() >= self._stop_at():
            self._lose(f"renew {self.resource}: stopped past what the lease allows", gone=False)
        return not self.lost.is_set()

    def __enter__(self):
        self.lock, self._renewed, self.joined = self.client.acquire(
            self.resource, self.owner, self.ttl, self.wait, guarded=True
        )
        self.fence = self.lock["fence"]
        for keep in (self._renew, self._watch):
            threading.Thread(target=keep, daemon=True).start()
        return self

    def _stop_at(self):
        """When the lease is lost unless a renewal succeeds first: the deadline less the grace."""
        return self.deadline - grace(self.ttl)

    def _renew(self):
        """Renews every ttl/3 (a second after a failure), each request given up by the stop."""
        pause = self.ttl / 3
        while True:
            with self._news:
                if self._news.wait_for(lambda: self._leaving or self.lost.is_set(), pause):
                    return
            sent = time.monotonic()
            left = self._stop_at() - sent
            if left <= 0:
                return  # the watch says it is lost
            timeout = min(CALL_TIMEOUT, left)
            try:
                self.client.renew(self.resource, self.owner, self.ttl, self.fence, timeout)
            except (Lost, Refused) as error:  # Refused: the token was taken away
                self._lose(str(error), gone=True)
                return
            except LockError:
                pause = min(self.ttl / 3, 1)  # no answer, or 5xx: again soon, while time is left
                continue
            with self._news:
                self._renewed = max(self._renewed, sent)
                self._news.notify_all()
            pause = max(0, sent + self.ttl / 3 - time.monotonic())

    def _watch(self):
        """Declares the lease lost when no renewal has succeeded by the stop."""
        with self._news:
            while not (self._leaving or self.lost.is_set()):
                left = self._stop_at() - time.monotonic()
                if left <= 0:
                    break
                self._news.wait(left)
            told = self._leaving or self.lost.is_set()
        if not told:
            self._lose(f"renew {self.resource}: no renewal succeeded in time", gone=False)

    def _lose(self, why, gone):
        """The lease is lost (`gone`: the server said so): tells the body, once."""
        with self._news:
            if self._leaving or self.lost.is_set():
                return
            self.why, self._gone = Lost(why), gone
            self.lost.set()
            self._news.notify_all()
            on_lost = self.on_lost
        if on_lost:
            on_lost()

    def _release(self):
        """Gives the tenure back, sent again while the server answers 503 (its store is away)
        or not at all, until the lease's end: a job that ended while the store was away has its
        lock given back once the store is there again, not at the end of its TTL. Past the
        lease's end the lock has ended anyway: then a line says so, and nothing is raised."""
        failed = None
        while True:
            with self._news:
                left = self._renewed + self.ttl - time.monotonic()  # the lease, at the least
            if left <= 0:
                if failed:
                    print(f"distlock_client: {failed}; the lease has ended it", file=sys.stderr)
                return
            try:
                return self.client.release(
                    self.resource, self.owner, self.fence, min(CALL_TIMEOUT, left)
                )
            except (Lost, Refused):
                raise
            except LockError as error:
                if getattr(error, "status", 503) != 503:
                    raise
                failed = error
            time.sleep(min(0.5, left))

    def __exit__(self, kind, error, trace):
        with self._news:
            self._leaving = True
            self._news.notify_all()
        try:
            # Not if the server said the lease is gone, nor a joined tenure: its taker releases.
            if not (self._gone or self.joined):
                self._release()
        except LockError as failed:
            if kind is None and not self.lost.is_set():
                raise
            # The body's own exception, or the lost lease, goes on; the lease ends the lock.
            print(f"distlock_client: {failed}", file=sys.stderr)
        if self.lost.is_set() and kind is None:
            raise self.why


def lock(resource, *, owner, ttl=30, wait=0, client=None, on_lost=None):
    """`with lock(...) as held:` holds `resource` for `owner` while the body runs."""
    return Held(client or Client(), resource, owner, ttl, wait, on_lost)


# The signals `run` does not pass on, as `distlock run` keeps them: KILL and STOP cannot be
# caught, SEGV, BUS, ILL and FPE are a fault of the client's own, CHLD is its news of the
# command, and Python ignores PIPE and XFSZ (a failed write raises instead).
KEPT = {"SIGKILL", "SIGSTOP", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGCHLD", "SIGPIPE",
        "SIGXFSZ"}
# Job control: the command stops, then the client, as the shell that sent it expects.
JOB_CONTROL = {signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}


def forwarded():
    """Every signal `run` passes on to the command: all it can catch, but KEPT."""
    kept = {getattr(signal, name) for name in KEPT if hasattr(signal, name)}
    return sorted(set(signal.valid_signals()) - kept)


def dies_with_this_process(number=signal.SIGKILL):
    """A function for a child to call before its command starts, so that it gets signal
    `number` when this process dies, SIGKILL included: Linux's parent-death signal
    (prctl(PR_SET_PDEATHSIG)), which the kernel sends when the thread that started the child
    ends. None where there is no prctl."""
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is None:
        return None
    parent = os.getpid()

    def set_it():
        prctl(1, int(number))  # PR_SET_PDEATHSIG; resolved above, nothing to load after fork
        if os.getppid() != parent:  # this process died before: too late to be told
            os.kill(os.getpid(), number)

    return set_it


def run(held, command):
    """Runs `command` under `held` in a session of its own, which is stopped when the lease is
    lost (SIGTERM, then SIGKILL by the deadline) and killed with this process (Linux); returns
    its exit status (128+N: signal N). Called on the main thread, it passes every signal it
    can catch on to the command until the command exits, ^Z included (see the module's
    doc), and then puts the signals' handlers back."""
    held.check()  # never started without the lease
    env = dict(os.environ, DISTLOCK_FENCE=str(held.fence))
    child, early = None, []  # early: signals that came before the command started
    ended, stopping = threading.Event(), threading.Lock()
    suspended = False

    def group(number):
        try:
            os.killpg(child.pid, number)
        except ProcessLookupError:
            pass  # nothing of it is left

    def stop():
        if not stopping.acquire(blocking=False):
            return  # stopped already
        if time.monotonic() >= held.deadline:
            group(signal.SIGKILL)  # stopped (^Z) past the deadline: never run beside the next
            return
        group(signal.SIGTERM)
        group(signal.SIGCONT)  # a stopped job must run to act on it
        kill_at = min(held.deadline, time.monotonic() + grace(held.ttl))
        if not ended.wait(max(0, kill_at - time.monotonic())):
            group(signal.SIGKILL)

    def suspend(number):
        """The command stops (what ignores `number` too: SIGSTOP), then this process, with
        `number`; continued, it continues the command while the lease surely lasts."""
        nonlocal suspended
        group(signal.SIGSTOP)
        suspended = True
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)  # stopped here until SIGCONT
        signal.signal(number, forward)
        if held.resumed():
            group(signal.SIGCONT)
        suspended = False

    def forward(number, _frame):
        if child is None:
            early.append(number)
        elif number == signal.SIGCONT and (suspended or held.lost.is_set()):
            pass  # a stopped job goes on only while its lease surely lasts: `suspend`, `stop`
        else:
            group(number)
            if number in JOB_CONTROL:
                suspend(number)

    def lost():
        threading.Thread(target=stop, daemon=True).start()

    theirs = held.on_lost
    held.on_lost = lambda: (lost(), theirs and theirs())
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for number in forwarded():
            try:
                handlers[number] = signal.signal(number, forward)
            except (OSError, ValueError):
                pass  # one this platform does not let a program catch
    try:
        child = subprocess.Popen(
            command, env=env, start_new_session=True, preexec_fn=dies_with_this_process()
        )
        for number in early:
            forward(number, None)
        if held.lost.is_set():  # lost before `on_lost` was set
            lost()
        code = child.wait()
        ended.set()
        if held.lost.is_set():
            group(signal.SIGKILL)  # what it started goes with it
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return 128 - code if code < 0 else code  # -N: killed by signal N


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="distlock_client.py",
        usage="%(prog)s RESOURCE [--owner O] [--ttl S] [--wait S] -- CMD [ARG...]",
        description="Runs CMD holding RESOURCE, a lock of a distlock server.",
    )
    parser.add_argument("resource")
    owner = f"{socket.gethostname()}:{os.getpid()}"
    parser.add_argument("--owner", default=owner, help="who holds it (default: HOST:PID)")
    parser.add_argument("--ttl", type=int, default=30, help="the lease, seconds")
    parser.add_argument("--wait", type=int, default=0, help="the longest wait in line, seconds")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1 :]
    if not command:
        parser.error("a command to run after --")
    # INT, TERM and HUP while waiting in line end the wait: the place is given up. Once CMD
    # has run, they no longer cut the release short.
    waiting = True

    def interrupt(number, _):
        if waiting:
            raise KeyboardInterrupt(number)

    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, interrupt)
    try:
        with lock(args.resource, owner=args.owner, ttl=args.ttl, wait=args.wait) as held:
            waiting = False
            return run(held, command)
    except KeyboardInterrupt as stop:
        number = stop.args[0] if stop.args else signal.SIGINT
        print(f"distlock_client: interrupted while waiting for {args.resource}; left the queue",
              file=sys.stderr)
        return 128 + number
    except LockError as error:
        print(f"distlock_client: {error}", file=sys.stderr)
        return {Busy: 75, Refused: 77, Lost: 124}.get(type(error), 74)
    except OSError as error:  # CMD could not be started; the lock was given back
        print(f"distlock_client: {command[0]}: {error.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
