"""The critical section that `distlock run` guards in a campaign.

    section.py CLIENT STORE MODE SECTIONS_FILE REGISTER_FOLDER PAUSES

It reads its tenure from the variables `run` exports (`DISTLOCK_OWNER`, and
`DISTLOCK_RESOURCE`/`DISTLOCK_FENCE` or, under a lock set, `DISTLOCK_RESOURCES`/
`DISTLOCK_FENCES`), records its start in SECTIONS_FILE, then for each pause of PAUSES (seconds,
comma-separated) but the last sleeps that long and operates on every resource's register with
its fence (a write when MODE is exclusive, a read when shared or counted), sleeps the last
pause, and records its end. SIGTERM, SIGINT or SIGHUP (what `run` sends when the lease is lost)
records its end at once and exits 128+N, so the history knows when the command stopped; a
command killed outright (SIGKILL) has no end, and its last register operation stands for it.

It runs without libfaketime (the client's command line takes it out of the environment), so
its times are the host's real clock, as every time in the history is.
"""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from chaos_lib import register  # noqa: E402


def main(argv):
    client, store, mode, sections, folder, pauses = argv
    pauses = [float(p) for p in pauses.split(",")]
    owner = os.environ["DISTLOCK_OWNER"]
    if "DISTLOCK_FENCES" in os.environ:
        fences = {r: int(f) for r, f in json.loads(os.environ["DISTLOCK_FENCES"]).items()}
    else:
        fences = {os.environ["DISTLOCK_RESOURCE"]: int(os.environ["DISTLOCK_FENCE"])}

    def record(event, **more):
        register.append_line(
            sections, {"ev": event, "owner": owner, "t": time.time(), "client": client, **more}
        )

    def stopped(signum, _frame):
        record("end", reason="terminated", signal=signum)
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stopped)
    record("start", store=store, mode=mode, fences=fences, pid=os.getpid())
    op = "write" if mode == "exclusive" else "read"
    for pause in pauses[:-1]:
        time.sleep(pause)
        for resource, fence in sorted(fences.items()):
            register.apply(folder, resource, fence, op, owner, client)
    time.sleep(pauses[-1])
    record("end", reason="done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
