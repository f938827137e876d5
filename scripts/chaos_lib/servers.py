"""The campaign's `distlock serve` processes: started on a port chosen once (a restart after
SIGKILL comes back on the same address, so clients and proxies need not change), killed,
stopped (SIGSTOP) and continued by the nemesis, and stopped with SIGTERM at the end."""

import os
import signal
import socket
import subprocess
import time

# How long a server may take to listen after it starts.
START_TIMEOUT = 30.0


class ServerError(Exception):
    pass


class Server:
    def __init__(self, name, bin_path, db, port, log):
        self.name = name
        self.bin = bin_path
        self.db = db
        self.port = port
        self.log = log
        self.proc = None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DISTLOCK_")}

    def start(self):
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.bin, "--db", self.db, "serve", "--listen", f"127.0.0.1:{self.port}"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"{self.name} exited {self.proc.returncode} at start (see {self.log})"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise ServerError(
            f"{self.name} did not listen on port {self.port} within {START_TIMEOUT} s"
        )

    def signal(self, signum):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signum)

    def kill(self):
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self):
        """SIGTERM (after SIGCONT, in case it was stopped); SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()
