#!/bin/sh
# Deploys production under the lock "deploy-production", held across every step, and hands
# each step the lock's fence so the targets can reject a stale deploy's late writes.
# Exit 0: deployed; 75: another deploy holds the lock, nothing was done; 124: the lease was
# lost, or a step would have run on past it and was stopped; other: failed.
# It takes the lock itself: run it directly, not under `distlock run` for the same resource.
# Linux: the direct step's clock is /proc/uptime.
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
# From here on, give the lock back however the script ends (failed, ^C or killed), and end
# with the status it ended with, not the release's.
trap 'rc=$?; distlock release "$resource" --owner "$owner" >/dev/null || :; exit $rc' EXIT
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
# stops it, and what it started, 7/10 of the lease after the renew was sent (SIGTERM) and 8/10
# (SIGKILL), counted on a clock nobody sets (/proc/uptime, in hundredths of a second).
now() { read -r up _ </proc/uptime; echo $((${up%.*} * 100 + 1${up#*.} - 100)); }
secs() { printf '%d.%02d' $(($1 / 100)) $(($1 % 100)); }
renewed=$(now)
distlock renew "$resource" --owner "$owner" --ttl "$ttl" >/dev/null ||
  { echo "deploy: lost the lock after migrating" >&2; exit 124; }
left=$((renewed + ttl * 70 - $(now)))  # until SIGTERM: a slow answer takes from it
[ "$left" -gt 0 ] ||
  { echo "deploy: the renew came back too late to switch traffic" >&2; exit 124; }
timeout --kill-after="$(secs $((ttl * 10)))" "$(secs "$left")" ./switch-traffic.sh "$fence" || {
  rc=$?  # timeout(1)'s 124, or 137 once it sent SIGKILL; or the step's own failure
  [ "$(now)" -lt $((renewed + ttl * 70)) ] ||
    { echo "deploy: switch-traffic was stopped before its lease could end" >&2; rc=124; }
  exit "$rc"
}

trap - EXIT INT TERM
distlock release "$resource" --owner "$owner" >/dev/null
echo "deploy: done (fence $fence)" >&2
