"""A TCP proxy on 127.0.0.1 that the nemesis turns into a partition, a slow network or a cut.

It forwards bytes both ways between its clients and one upstream address (PostgreSQL, or a
`distlock serve`), in one of four modes:

| mode | what the connections see |
| --- | --- |
| `forward` | bytes go through |
| `hold` | a partition: nothing goes through either way, open connections stay open and new ones wait unaccepted in the listen queue; when it heals, what was held goes through, late, as TCP delivers after a partition |
| `delay` | a slow network: each chunk goes through after a delay |
| `cut` | every open connection is reset, and new ones are refused (the listener is closed) until it heals |

Each connection has a thread per direction; every thread wakes at least every 50 ms to look at
the mode, and `close` ends them all.
"""

import select
import socket
import struct
import threading
import time

TICK = 0.05


class Proxy:
    def __init__(self, name, port, upstream_port):
        self.name = name
        self.port = port
        self.upstream = ("127.0.0.1", upstream_port)
        self.mode = "forward"
        self.delay = 0.0
        self.lock = threading.Lock()
        self.conns = []
        self.listener = None
        self.closed = False
        self.threads = []
        self.accepting = threading.Thread(
            target=self.accept_loop, name=f"proxy-{name}", daemon=True
        )

    def start(self):
        self.listen()
        self.accepting.start()

    def listen(self):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(128)
        sock.setblocking(False)
        with self.lock:
            self.listener = sock

    def set_mode(self, mode, delay=0.0):
        """Plays a fault (`hold`, `delay`, `cut`) or heals (`forward`)."""
        with self.lock:
            self.mode = mode
            self.delay = delay
            conns = list(self.conns) if mode == "cut" else []
            listener = self.listener if mode == "cut" else None
            if mode == "cut":
                self.listener = None
        for conn in conns:
            conn.reset()
        if listener is not None:
            listener.close()
        if mode != "cut":
            with self.lock:
                reopen = self.listener is None and not self.closed
            if reopen:
                self.listen()

    def accept_loop(self):
        while not self.closed:
            with self.lock:
                listener = self.listener
                mode = self.mode
            if listener is None or mode == "hold":
                time.sleep(TICK)
                continue
            try:
                ready, _, _ = select.select([listener], [], [], TICK)
            except (OSError, ValueError):
                continue
            if not ready:
                continue
            try:
                client, _ = listener.accept()
            except (BlockingIOError, OSError):
                continue
            client.setblocking(True)
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                reset(client)
                continue
            conn = Conn(self, client, upstream)
            with self.lock:
                self.conns = [c for c in self.conns if not c.done]
                self.conns.append(conn)
            conn.start()

    def close(self):
        self.closed = True
        with self.lock:
            conns = list(self.conns)
            listener, self.listener = self.listener, None
        if listener is not None:
            listener.close()
        for conn in conns:
            conn.reset()
        self.accepting.join(timeout=5)
        for conn in conns:
            conn.join()


class Conn:
    """One proxied connection: a pump thread per direction."""

    def __init__(self, proxy, client, upstream):
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.done = False
        self.pumps = [
            threading.Thread(target=self.pump, args=(client, upstream), daemon=True),
            threading.Thread(target=self.pump, args=(upstream, client), daemon=True),
        ]

    def start(self):
        for pump in self.pumps:
            pump.start()

    def join(self):
        for pump in self.pumps:
            pump.join(timeout=5)

    def reset(self):
        """Closes both sides with a reset (RST), as a dropped connection looks."""
        self.done = True
        reset(self.client)
        reset(self.upstream)

    def pump(self, src, dst):
        try:
            while not self.done and not self.proxy.closed:
                mode, delay = self.proxy.mode, self.proxy.delay
                if mode == "hold":
                    time.sleep(TICK)
                    continue
                ready, _, _ = select.select([src], [], [], TICK)
                if not ready:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                if mode == "delay":
                    time.sleep(delay)
                while self.proxy.mode == "hold" and not self.done and not self.proxy.closed:
                    time.sleep(TICK)
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        self.done = True
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass


def reset(sock):
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
