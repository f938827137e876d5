"""Reads a campaign's folder back into the one history the checker reads (see `checker`).

The folder holds:

- `config.json`: the campaign (seed, duration, start, clients and their ways in);
- `clients/CLIENT.calls.jsonl` and `clients/CLIENT.sections.jsonl`: what each client ran and
  each critical section's start and end;
- `register/STORE/RESOURCE.jsonl`: the register's operations, in its own order;
- `nemesis.jsonl`: the faults, each written when it ended;
- `stores/STORE.log.jsonl`: each store's history (`distlock log`), read once it settled;
- `final.json`: what each store still held once every client was gone and every lease over.

A line that cannot be read (a process killed in the middle of its last write) is counted in
`unreadable`, not guessed at.
"""

import glob
import json
import os


def read_lines(path, counter):
    records = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except ValueError:
                    counter[0] += 1
    except FileNotFoundError:
        pass
    return records


def load(folder):
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    unreadable = [0]
    clients = {
        name: {"store": c["store"], "way": c["way"], "kind": c["kind"]}
        for name, c in config["clients"].items()
    }
    calls = []
    sections = []
    for name in sorted(clients):
        base = os.path.join(folder, "clients", name)
        calls.extend(read_lines(base + ".calls.jsonl", unreadable))
        started = {}
        for event in read_lines(base + ".sections.jsonl", unreadable):
            if event["ev"] == "start":
                section = {
                    "client": name,
                    "owner": event["owner"],
                    "store": event["store"],
                    "mode": event["mode"],
                    "fences": event["fences"],
                    "start": event["t"],
                    "end": None,
                    "reason": None,
                }
                started[event["owner"]] = section
                sections.append(section)
            elif event["ev"] == "end" and event["owner"] in started:
                section = started[event["owner"]]
                if section["end"] is None:
                    section["end"] = event["t"]
                    section["reason"] = event.get("reason")
    register = []
    for path in sorted(glob.glob(os.path.join(folder, "register", "*", "*.jsonl"))):
        store = os.path.basename(os.path.dirname(path))
        for op in read_lines(path, unreadable):
            op["store"] = store
            register.append(op)
    store_log = {}
    for path in sorted(glob.glob(os.path.join(folder, "stores", "*.log.jsonl"))):
        store = os.path.basename(path)[: -len(".log.jsonl")]
        store_log[store] = read_lines(path, unreadable)
    faults = read_lines(os.path.join(folder, "nemesis.jsonl"), unreadable)
    final = {}
    final_path = os.path.join(folder, "final.json")
    if os.path.exists(final_path):
        with open(final_path, encoding="utf-8") as f:
            final = json.load(f)
    return {
        "seed": config.get("seed"),
        "started": config.get("started", 0.0),
        "ended": config.get("until", 0.0),
        "clients": clients,
        "calls": calls,
        "sections": sections,
        "register": register,
        "store_log": store_log,
        "faults": faults,
        "final": final,
        "unreadable": unreadable[0],
    }
