"""distlock's fault campaign: many clients, a nemesis, and a checker over the whole history.

`scripts/chaos` runs distlock the way its users do, through every way in at once (the SQLite
store directly, PostgreSQL directly, and `distlock serve` over each), while a nemesis injects the
faults the contract says distlock survives, at random moments chosen from a seed. Every client
records what it asked and what it was told; the critical sections record when they ran and
write, with their fence, to a register that refuses stale fences; at the end the runner reads
each store's own history (`distlock log`). The checker then reads all of it and names every
anomaly: two holders at once, a fence reused or going backwards, a stale write accepted, a grant
the store never recorded, a lock left held, a waiter lost, a command left running past its lease.

The modules:

- `runner`: the command line, the campaign's set-up and tear-down, the figures it prints;
- `cluster`: the campaign's own PostgreSQL cluster (from `scripts/pg-test-server`), stopped,
  started and restarted by the nemesis;
- `servers`: the `distlock serve` processes, killed, paused and restarted by the nemesis;
- `proxy`: TCP proxies in front of PostgreSQL and of the servers, which the nemesis turns into a
  partition (bytes held), a slow network (bytes delayed) or a cut (connections reset, new ones
  refused);
- `clients`: one process per client, looping `distlock run`, raw `acquire`/`renew`/`release`,
  or waiters that give up;
- `section`: the command each `distlock run` guards: it records its start and end and writes
  to the register with its fence;
- `register`: the protected resource, a fenced register per lock resource;
- `nemesis`: the fault schedule (drawn from the seed before the campaign starts) and the faults;
- `history`: reads a campaign's folder back into one history;
- `reaper`: stops everything the campaign started if the runner dies without tearing down;
- `timeline`: intervals (outages, pauses) and how much of a span they cover;
- `checker`: the anomalies, and the figures of a history.

Two rules decide which faults the campaign may inject, and both come from what the contract
promises rather than from what is easy to break:

Clocks. The SQLite store uses its host's clock, and every process of one host shares that clock:
a process with a wall clock of its own on a SQLite store is not a fault any SQLite user can
meet, so the campaign never fakes the clock of a client of the SQLite store. PostgreSQL's
clock (`now()`) and a server's decide for their clients, so a client of PostgreSQL or of a
server may have its wall clock stepped (libfaketime, `FAKETIME_TIMESTAMP_FILE` rewritten at
random moments), and that must change nothing. The monotonic clock is never faked
(`FAKETIME_DONT_FAKE_MONOTONIC=1`): `run` times its lease on it, and a lease timed on a clock
that runs at another rate than the store's is unsafe in every lease system, so a fault of that
kind would only show the campaign's own premise broken. The critical sections' commands run
with the fake taken out of their environment, so every time the history records is the host's
real wall clock, the one the stores use too.

Pausing a client. `distlock run` guards its command: it renews the lease and stops the command
before the lease can end. The one documented way to leave a command unguarded is to stop the
guard alone with SIGSTOP (the book's Guarantees and limits says so), as a user who does that is
not protected by anything. So the nemesis stops a client whole: every process group of the
client's process tree (the client's own, which holds the guard, and the command's, which `run`
puts in a group of its own), as a frozen VM or a SIGSTOP to the whole job would. A holder
stopped past its lease cannot know it lost it; when it continues, its guard stops the command at
once, but the command may run for a moment first. That is the documented limit of leases ("A
paused holder can outlive its lease"), which fences are for: the checker allows such a holder's
late moment only when the store's history shows its lease ended while it was stopped, and then
its writes must have been refused by the register if a newer fence had written.

A seed makes a campaign reproducible in what it chooses: the nemesis' schedule (which fault, on
what, when, for how long) and every client's sequence of choices (resource, mode, TTL, wait,
how long its critical section runs) are drawn from it. The interleavings that the operating
system makes are not; a rerun with the same seed replays the same decisions against them.
"""
