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

The lease rule (distlock's book, "The lease rule, for every client"), as `Held` keeps it. The
deadline is when the last renewal that succeeded (or the request that got the lock) was sent, on
the monotonic clock, + ttl - margin(ttl); the server counts the lease from when that request
reached it, a little later. The lease is lost when a renewal is answered 404 or 403 (it expired,
was broken, or is another's) or 401 (the token was taken away), or when none has succeeded by
the deadline - grace(ttl): no renewal is sent with a timeout past that point. Then `held.lost`
is set, `on_lost` is called, `held.check()` raises Lost, and so does leaving the block. Python
cannot stop the body from outside: a long body stops itself by the deadline (`held.deadline`),
calling `held.check()` between its steps, waiting on `held.lost`, or stopping what it started in
`on_lost`. `run(held, command)` runs a command that way.

As a command, which runs CMD under the lock with the fence in DISTLOCK_FENCE and exits with
its status (75: still busy; 77: refused; 74: unreachable; 124: the lease was lost, CMD stopped):

    distlock_client.py deploy/prod --owner deployer@web-1 --ttl 30 --wait 600 -- ./deploy.sh

The command keeps the rule as `distlock run` does: CMD runs in a session of its own, which gets
SIGTERM when the lease is lost and SIGKILL grace(ttl) later, by the deadline at the latest; INT,
TERM and HUP sent to the client are passed on to CMD.

DISTLOCK_URL names the server (default http://127.0.0.1:7878), DISTLOCK_TOKEN its token (sent
in a header, never printed), DISTLOCK_CA_CERT a CA file to check an https:// server against.
"""

import argparse
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

    def acquire(self, resource, owner, ttl, wait=0):
        """Takes `resource` for `owner` with a lease of `ttl` seconds, waiting in line up to
        `wait` seconds; returns the lock (its "fence", "expires_at", ...) and when its lease
        began at the earliest, on time.monotonic(): when the request that got it was sent, plus
        what the server says it waited (Distlock-Waited-Ms) before it granted it."""
        deadline = time.monotonic() + wait
        while True:
            left = max(0, math.ceil(deadline - time.monotonic()))
            body = {"owner": owner, "ttl_seconds": ttl, "wait_seconds": left}
            sent = time.monotonic()
            try:
                status, answer, headers = self.call("POST", path(resource), body, TIMEOUT)
            except KeyboardInterrupt:
                self.give_up(resource, owner)
                raise
            if status != 200:
                raise problem(f"acquire {resource}", status, answer)
            if answer["acquired"]:
                waited = int(headers.get("Distlock-Waited-Ms") or 0) / 1000
                return answer["lock"], sent + waited
            # One request waits up to 30 s, then answers busy with our place in line, which is
            # kept 5 s for the request that posts again with the wait that is left.
            if "position" not in answer or left == 0:
                error = Busy(f"{resource} is held by {holders(answer)} (waited {wait} s)")
                error.answer = answer
                raise error

    def give_up(self, resource, owner):
        """Leaves the queue of `resource` at once, as a waiter interrupted while it waits: the
        next in line is not held back for the 5 s the server would otherwise keep the place.
        A grant the interrupted request got meanwhile is given back too (the owner is this
        client's own). Best effort, 2 s at most for each: a server that cannot be told gives
        the place up itself within 5 s, and the lock ends by its TTL."""
        for method, tail in (("POST", "/leave"), ("DELETE", "")):
            try:
                self.call(method, path(resource) + tail, {"owner": owner}, 2)
            except LockError:
                pass

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
        """Raises Lost once the lease is lost."""
        if self.lost.is_set():
            raise self.why

    def __enter__(self):
        self.lock, self._renewed = self.client.acquire(
            self.resource, self.owner, self.ttl, self.wait
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

    def __exit__(self, kind, error, trace):
        with self._news:
            self._leaving = True
            self._news.notify_all()
            gone = self._gone
            left = self._renewed + self.ttl - time.monotonic()  # the lease, at the least
        try:
            # Given back while the lease may last, and by then; not if the server said it is gone.
            if not gone and left > 0:
                self.client.release(self.resource, self.owner, self.fence, min(CALL_TIMEOUT, left))
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


def run(held, command):
    """Runs `command` under `held` in a session of its own, which is stopped when the lease is
    lost (SIGTERM, then SIGKILL by the deadline); returns its exit status (128+N: signal N).
    Called on the main thread, it passes INT, TERM and HUP on to the command."""
    held.check()  # never started without the lease
    env = dict(os.environ, DISTLOCK_FENCE=str(held.fence))
    child = subprocess.Popen(command, env=env, start_new_session=True)
    ended, stopping = threading.Event(), threading.Lock()

    def group(number):
        try:
            os.killpg(child.pid, number)
        except ProcessLookupError:
            pass  # nothing of it is left

    def stop():
        if not stopping.acquire(blocking=False):
            return  # stopped already
        group(signal.SIGTERM)
        kill_at = min(held.deadline, time.monotonic() + grace(held.ttl))
        if not ended.wait(max(0, kill_at - time.monotonic())):
            group(signal.SIGKILL)

    theirs = held.on_lost
    held.on_lost = lambda: (stop(), theirs and theirs())
    if held.lost.is_set():  # lost before `on_lost` was set
        threading.Thread(target=stop, daemon=True).start()
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, lambda number, _: group(number))
    code = child.wait()
    ended.set()
    if held.lost.is_set():
        group(signal.SIGKILL)  # what it started goes with it
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
    # TERM and HUP while waiting in line end the wait as ^C does: the place is given up.
    def interrupt(number, _):
        raise KeyboardInterrupt(number)

    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, interrupt)
    try:
        with lock(args.resource, owner=args.owner, ttl=args.ttl, wait=args.wait) as held:
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
