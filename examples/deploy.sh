#!/bin/sh
# Deploys production under the lock "deploy-production", held across every step, and hands
# each step the lock's fence so the targets can reject a stale deploy's late writes.
# Exit 0: deployed; 75: another deploy holds the lock, nothing was done; 124: a step ran on
# past what its lease allows and was stopped; other: failed.
# It takes the lock itself: run it directly, not under `distlock run` for the same resource.
set -u
resource=deploy-production
ttl=300  # seconds
owner="$(hostname):$$"

out=$(distlock acquire "$resource" --owner "$owner" --ttl "$ttl")
rc=$?
case $rc in
  0) ;;
  75) echo "deploy: another deploy holds the lock; nothing done: $out" >&2; exit 75 ;;
  *) echo "deploy: cannot take the lock (distlock exit $rc)" >&2; exit 1 ;;
esac
# From here on, give the lock back however the script ends: failed, ^C or killed.
trap 'distlock release "$resource" --owner "$owner" >/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
set -e

# {"acquired":true,"lock":{...,"fence":7,...}} -> 7, without jq
fence=$(printf '%s\n' "$out" | sed -n 's/.*"fence":\([0-9][0-9]*\).*/\1/p')
[ -n "$fence" ] || { echo "deploy: no fence in $out" >&2; exit 1; }

# A step under `run --owner "$owner"` joins this tenure: same fence (also in $DISTLOCK_FENCE),
# the lease is renewed while the step runs (which `run` stops, 124, if the lease is lost), and
# the lock stays held when it ends.
distlock run --resource "$resource" --owner "$owner" --ttl "$ttl" -- ./migrate.sh "$fence"

# A short step may run directly, once a renew has given it a full lease, but it must be gone
# before that lease can end (distlock's book, "The lease rule, for every client"): timeout(1)
# stops it, and what it started, 7/10 of the lease after the renew (SIGTERM) and 8/10 (SIGKILL).
distlock renew "$resource" --owner "$owner" --ttl "$ttl" >/dev/null ||
  { echo "deploy: lost the lock after migrating" >&2; exit 1; }
timeout --kill-after=$((ttl / 10)) $((ttl * 7 / 10)) ./switch-traffic.sh "$fence"

trap - EXIT INT TERM
distlock release "$resource" --owner "$owner" >/dev/null
echo "deploy: done (fence $fence)" >&2
