"""The campaign's own PostgreSQL cluster, made by `scripts/pg-test-server` on a port and in a
folder of its own (never the shared test server's, 54329 and /tmp/distlock-test-pg), which the
nemesis stops, starts, restarts and whose distlock sessions it terminates.

The server refuses to run as root, so as root every server program runs as the `postgres`
user, as `scripts/pg-test-server` does.
"""

import glob
import os
import re
import shlex
import subprocess

# The shared test server of the suite: never stopped by a campaign.
SHARED_PORT = 54329
SHARED_DIR = "/tmp/distlock-test-pg"
DATABASE = "distlock_chaos"
# How long pg_ctl may take to stop or start the server.
PG_CTL_TIMEOUT = 60


class ClusterError(Exception):
    pass


def server_bin():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version_key)
    if not found:
        raise ClusterError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin)")
    return found[-1]


def version_key(path):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


class Cluster:
    def __init__(self, scripts, folder, port):
        if port == SHARED_PORT or os.path.realpath(folder) == SHARED_DIR:
            raise ClusterError("the campaign's cluster must not be the shared test server's")
        self.script = os.path.join(scripts, "pg-test-server")
        self.folder = folder
        self.port = port
        self.data = os.path.join(folder, "data")
        self.log = os.path.join(folder, "server.log")
        self.bin = server_bin()
        self.options = ""
        self.admin_url = None
        self.env = {
            **os.environ,
            "DISTLOCK_TEST_PG_PORT": str(port),
            "DISTLOCK_TEST_PG_DIR": folder,
        }

    def url(self, port=None):
        """The store's URL, on the server's port or on a proxy's."""
        return (
            f"postgres://postgres:distlock-test-password@127.0.0.1:{port or self.port}/"
            f"{DATABASE}?sslmode=disable"
        )

    def start(self):
        out = subprocess.run(
            [self.script, "start"], env=self.env, capture_output=True, text=True, timeout=300
        )
        if out.returncode != 0:
            raise ClusterError(f"pg-test-server start failed: {out.stderr.strip()}")
        match = re.search(r"DISTLOCK_TEST_PG_URL=(\S+)", out.stdout)
        if not match:
            raise ClusterError(f"pg-test-server printed no URL: {out.stdout.strip()}")
        self.admin_url = match.group(1)
        self.options = self.read_options()
        self.psql(f"CREATE DATABASE {DATABASE}")

    def read_options(self):
        """The server's settings as `pg_ctl start -o` takes them, from the command line that
        `pg_ctl` recorded (postmaster.opts: the program, -D and the folder, then the rest)."""
        with open(os.path.join(self.data, "postmaster.opts"), encoding="utf-8") as f:
            words = shlex.split(f.read())
        rest = []
        skip = False
        for word in words[1:]:
            if skip:
                skip = False
                continue
            if word == "-D":
                skip = True
                continue
            rest.append(word)
        return shlex.join(rest)

    def as_pg(self, argv):
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *argv]
        return argv

    def pg_ctl(self, *args):
        argv = self.as_pg([os.path.join(self.bin, "pg_ctl"), "-D", self.data, *args])
        out = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=PG_CTL_TIMEOUT + 30,
        )
        if out.returncode != 0:
            raise ClusterError(f"pg_ctl {' '.join(args)}: {out.stderr.strip()}")

    def stop(self, mode):
        self.pg_ctl("-m", mode, "-w", "-t", str(PG_CTL_TIMEOUT), "stop")

    def start_server(self):
        self.pg_ctl("-l", self.log, "-w", "-t", str(PG_CTL_TIMEOUT), "-o", self.options, "start")

    def restart(self, mode):
        self.pg_ctl(
            "-m", mode, "-l", self.log, "-w", "-t", str(PG_CTL_TIMEOUT), "-o", self.options,
            "restart",
        )

    def running(self):
        return os.path.exists(os.path.join(self.data, "postmaster.pid"))

    def psql(self, sql):
        out = subprocess.run(
            ["psql", self.admin_url, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode != 0:
            raise ClusterError(f"psql: {out.stderr.strip()}")
        return out.stdout.strip()

    def terminate_sessions(self):
        """Terminates every session of distlock's on the campaign's database; returns how many."""
        return self.psql(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            f"WHERE application_name LIKE 'distlock%' AND datname = '{DATABASE}'"
        )

    def teardown(self):
        subprocess.run(
            [self.script, "stop"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PG_CTL_TIMEOUT + 30,
        )
