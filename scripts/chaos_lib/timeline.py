"""Intervals on the host's wall clock: outages, pauses, and how much of a span they cover.

Every time in a campaign's history is seconds since the epoch (a float) on the host's real wall
clock, the one the stores use: the clients, the critical sections, the register and the nemesis
all run on this host and none of them has its clock faked.
"""

from datetime import datetime, timezone


def merge(intervals):
    """The union of `intervals` ((start, end) pairs), as sorted disjoint pairs."""
    merged = []
    for start, end in sorted(intervals):
        if end < start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def covered(merged, start, end):
    """How many seconds of [start, end] the disjoint sorted `merged` intervals cover."""
    total = 0.0
    for a, b in merged:
        if b <= start:
            continue
        if a >= end:
            break
        total += min(b, end) - max(a, start)
    return total


def parse_store_time(text):
    """A store's RFC 3339 UTC time with milliseconds (`2026-11-30T04:08:52.123Z`) in seconds."""
    stamp = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=timezone.utc).timestamp()
