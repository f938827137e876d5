#!/usr/bin/env python3
"""Locks through a lock server (`distlock serve`), with Python's standard library alone.

As a module, next to your code:

    from distlock_client import lock
    with lock("deploy/prod", owner="deployer@web-1", ttl=30, wait=600) as held:
        deploy(fence=held.fence)

The lock is taken on entry (waiting in line up to `wait` seconds), renewed every ttl/3 on a
thread while the body runs, and released with its fence however the body ends. Taking it
raises Busy (still held when the wait ran out), Refused (401 or 403: the token, or a resource
outside its prefixes) or LockError (the server unreachable, another answer); leaving it
raises Lost if the lease ended meanwhile (it expired, or an operator broke it): the body ran
without the lock from then on, and `held.lost` was set.

As a command, which runs CMD under the lock with the fence in DISTLOCK_FENCE and exits with
its status (75: still busy; 77: refused; 74: unreachable; 124: the lease was lost, CMD stopped):

    distlock_client.py deploy/prod --owner deployer@web-1 --ttl 30 --wait 600 -- ./deploy.sh

DISTLOCK_URL names the server (default http://127.0.0.1:7878), DISTLOCK_TOKEN its token (sent
in a header, never printed), DISTLOCK_CA_CERT a CA file to check an https:// server against.
"""

import argparse
import json
import math
import os
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


class LockError(Exception):
    """The lock could not be taken, kept or given back."""


class Busy(LockError):
    """Another owner still held the lock when the wait ran out."""


class Refused(LockError):
    """The server refused the token (401) or the request's resource (403)."""


class Lost(LockError):
    """The lease ended while the body ran."""


class Client:
    """One lock server, its token and CA."""

    def __init__(self, url=None, token=None, ca_cert=None):
        self.url = (url or os.environ.get("DISTLOCK_URL") or "http://127.0.0.1:7878").rstrip("/")
        self._token = token or os.environ.get("DISTLOCK_TOKEN")
        ca_cert = ca_cert or os.environ.get("DISTLOCK_CA_CERT")
        self._tls = ssl.create_default_context(cafile=ca_cert) if ca_cert else None

    def __repr__(self):
        return f"Client({self.url!r})"

    def call(self, method, path, body):
        """Sends one request; returns its status and its JSON answer (None for none)."""
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        if self._token:
            request.add_header("Authorization", "Bearer " + self._token)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT, context=self._tls) as answer:
                status, text = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read()
        except OSError as error:  # URLError, a refused connection, a timeout
            raise LockError(f"{method} {self.url}{path}: {getattr(error, 'reason', error)}") from None
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            raise LockError(f"{method} {self.url}{path}: {status}, not JSON") from None

    def acquire(self, resource, owner, ttl, wait=0):
        """Takes `resource` for `owner` with a lease of `ttl` seconds, waiting in line up to
        `wait` seconds; returns the lock (its "fence", "expires_at", ...)."""
        deadline = time.monotonic() + wait
        while True:
            left = max(0, math.ceil(deadline - time.monotonic()))
            body = {"owner": owner, "ttl_seconds": ttl, "wait_seconds": left}
            status, answer = self.call("POST", path(resource), body)
            if status != 200:
                raise problem(f"acquire {resource}", status, answer)
            if answer["acquired"]:
                return answer["lock"]
            # One request waits up to 30 s, then answers busy with our place in line, which is
            # kept 5 s for the request that posts again with the wait that is left.
            if "position" not in answer or left == 0:
                error = Busy(f"{resource} is held by {holders(answer)} (waited {wait} s)")
                error.answer = answer
                raise error

    def renew(self, resource, owner, ttl, fence):
        """Extends the tenure `fence` of `owner` to `ttl` seconds from now."""
        body = {"owner": owner, "ttl_seconds": ttl, "fence": fence}
        status, answer = self.call("POST", path(resource) + "/renew", body)
        if status != 200:
            raise problem(f"renew {resource}", status, answer, lost=status in (403, 404))
        return answer["lock"]

    def release(self, resource, owner, fence):
        """Gives back the tenure `fence` of `owner`."""
        body = {"owner": owner, "fence": fence}
        status, answer = self.call("DELETE", path(resource), body)
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
    """A lock held by a `with` block; see `lock`."""

    def __init__(self, client, resource, owner, ttl, wait):
        self.client, self.resource, self.owner = client, resource, owner
        self.ttl, self.wait = ttl, wait
        self.lock = self.fence = self.why = None
        self.lost = threading.Event()
        self.on_lost = None  # called on the renewing thread when the lease is lost
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew, daemon=True)

    def __enter__(self):
        self.lock = self.client.acquire(self.resource, self.owner, self.ttl, self.wait)
        self.fence = self.lock["fence"]
        self._renewer.start()
        return self

    def _renew(self):
        while not self._stop.wait(self.ttl / 3):
            try:
                self.client.renew(self.resource, self.owner, self.ttl, self.fence)
            except (Lost, Refused) as error:  # Refused: the token was taken away
                self.why = error
                self.lost.set()
                if self.on_lost:
                    self.on_lost()
                return
            except LockError:
                pass  # unreachable this time: two thirds of the lease are left; try again

    def __exit__(self, kind, error, trace):
        self._stop.set()
        self._renewer.join()
        try:
            if not self.lost.is_set():
                self.client.release(self.resource, self.owner, self.fence)
        except LockError as failed:
            if kind is None:
                raise
            # The body's own exception goes on; the lease ends the lock within ttl.
            print(f"distlock_client: {failed}", file=sys.stderr)
        if self.lost.is_set() and kind is None:
            raise self.why


def lock(resource, *, owner, ttl=30, wait=0, client=None):
    """`with lock(...) as held:` holds `resource` for `owner` while the body runs."""
    return Held(client or Client(), resource, owner, ttl, wait)


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
    try:
        with lock(args.resource, owner=args.owner, ttl=args.ttl, wait=args.wait) as held:
            env = dict(os.environ, DISTLOCK_FENCE=str(held.fence))
            child = subprocess.Popen(command, env=env)
            held.on_lost = child.terminate
            code = child.wait()
        return 128 - code if code < 0 else code  # -N: killed by signal N
    except LockError as error:
        print(f"distlock_client: {error}", file=sys.stderr)
        return {Busy: 75, Refused: 77, Lost: 124}.get(type(error), 74)
    except OSError as error:  # CMD could not be started; the lock was given back
        print(f"distlock_client: {command[0]}: {error.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
