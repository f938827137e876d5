"""The protected resource: a fenced register per lock resource, as a real fenced store keeps one.

Each lock resource of a store has a register in the campaign's folder (`register/STORE/`):
`RESOURCE.max` holds the highest fence the register has seen, and `RESOURCE.jsonl` records
every operation in the register's own order, with the time, the fence, the owner and whether
it was accepted. A write with a fence lower than the highest seen is refused (a stale holder's
late write); a write with the highest fence or a higher one is accepted and raises it. A read
(what a shared or counted holder does) is never refused and raises the highest fence too, so a
writer whose tenure came before a reader's is refused after that read, as a store that checks
fences on every access would.

`flock(2)` on `RESOURCE.lock` makes each check-and-record atomic across every process of the
campaign; it is held for a few file operations, never across a wait.
"""

import fcntl
import json
import os
import time


def apply(folder, resource, fence, op, owner, client):
    """Does `op` ("write" or "read") with `fence` on `resource`'s register in `folder`; returns
    whether it was accepted."""
    base = os.path.join(folder, resource)
    with open(base + ".lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            try:
                with open(base + ".max", encoding="utf-8") as f:
                    highest = int(f.read().strip() or 0)
            except FileNotFoundError:
                highest = 0
            accepted = op == "read" or fence >= highest
            if accepted and fence > highest:
                with open(base + ".max.new", "w", encoding="utf-8") as f:
                    f.write(f"{fence}\n")
                os.replace(base + ".max.new", base + ".max")
            record = {
                "t": time.time(),
                "resource": resource,
                "fence": fence,
                "op": op,
                "accepted": accepted,
                "owner": owner,
                "client": client,
            }
            append_line(base + ".jsonl", record)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return accepted


def append_line(path, record):
    """Appends `record` as one JSON line with a single write(2), so that lines of processes
    writing the same file never interleave."""
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
