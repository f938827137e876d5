"""The campaign's dead man's switch: if the runner dies without tearing down (SIGKILL, a crash),
this stops what it started, so that a campaign always ends by itself.

    python3 -m chaos_lib.reaper FOLDER      (its standard input: a pipe the runner holds open)

The runner keeps `FOLDER/running.json` up to date with what runs (the clients' and servers'
process ids, and the PostgreSQL cluster's folder and port), and removes it once it has stopped
all of it. The reaper reads its standard input until the runner's end of the pipe closes, which
happens however the runner ends; then, if `running.json` is still there, it continues and
kills every process group of each client's tree (a client may be stopped by the nemesis), kills
the servers, and stops the cluster with `scripts/pg-test-server stop`. A process id is acted on
only while its command line is still the one recorded, never a process that reused the id.
"""

import json
import os
import signal
import subprocess
import sys

from .nemesis import process_tree

RUNNING = "running.json"


def command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Reaper:
    """The runner's side: starts the reaper and tells it what runs."""

    def __init__(self, folder):
        self.folder = folder
        read, self.write = os.pipe()
        scripts = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chaos_lib.reaper", folder],
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": scripts, "PYTHONDONTWRITEBYTECODE": "1"},
            # Its own session: a ^C to the runner's terminal does not end it first.
            start_new_session=True,
        )
        os.close(read)

    def note(self, running):
        """Records what runs now: {"clients": {pid: marker}, "servers": {…}, "cluster": {…}}."""
        path = os.path.join(self.folder, RUNNING)
        with open(path + ".new", "w", encoding="utf-8") as f:
            json.dump(running, f)
        os.replace(path + ".new", path)

    def done(self):
        """Everything was stopped: the reaper has nothing to do, and ends."""
        if self.write is None:
            return
        try:
            os.remove(os.path.join(self.folder, RUNNING))
        except FileNotFoundError:
            pass
        os.close(self.write)
        self.write = None
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def reap(folder):
    try:
        with open(os.path.join(folder, RUNNING), encoding="utf-8") as f:
            running = json.load(f)
    except (FileNotFoundError, ValueError):
        return
    for pid, marker in running.get("clients", {}).items():
        if marker in command_line(int(pid)):
            for member in process_tree(int(pid)):
                try:
                    group = os.getpgid(member)
                    os.killpg(group, signal.SIGCONT)
                    os.killpg(group, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    for pid, marker in running.get("servers", {}).items():
        if marker in command_line(int(pid)):
            try:
                os.kill(int(pid), signal.SIGCONT)
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    cluster = running.get("cluster")
    if cluster:
        subprocess.run(
            [cluster["script"], "stop"],
            env={
                **os.environ,
                "DISTLOCK_TEST_PG_PORT": str(cluster["port"]),
                "DISTLOCK_TEST_PG_DIR": cluster["folder"],
            },
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
        )
    try:
        os.remove(os.path.join(folder, RUNNING))
    except FileNotFoundError:
        pass


def main(argv):
    (folder,) = argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass
    reap(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
