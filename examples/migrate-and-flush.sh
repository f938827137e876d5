#!/bin/sh
# migrate-and-flush.sh: the deploy step that migrates the database and then flushes the cache.
# It runs under one lock set on both, so that no other deploy, and no job that uses the cache,
# comes between the two:
#   distlock run --resource db-primary --resource cache-cluster --wait 10m -- ./migrate-and-flush.sh
# Each member of the set has a fence of its own, in DISTLOCK_FENCES
# ({"cache-cluster":7,"db-primary":8}), and each write carries its own resource's fence, so the
# database and the cache can each refuse a stale deploy's late write.
# Exit 0: done; 64: not run under both locks, nothing done; other: the failed step's status.
set -eu

# NAME's fence in $DISTLOCK_FENCES, without jq; empty when the set has no NAME.
fence_of() {
  printf '%s\n' "${DISTLOCK_FENCES:-}" | sed -n "s/.*\"$1\":\([0-9][0-9]*\).*/\1/p"
}
db_fence=$(fence_of db-primary)
cache_fence=$(fence_of cache-cluster)
if [ -z "$db_fence" ] || [ -z "$cache_fence" ]; then
  echo "migrate-and-flush: run it under distlock run --resource db-primary --resource cache-cluster" >&2
  exit 64
fi

# The schema first, then the cache, which then refills from the new schema. Each step hands
# its fence to its target, which keeps the highest it has seen and refuses a lower one.
./migrate.sh "$db_fence"
./flush-cache.sh "$cache_fence"
echo "migrate-and-flush: done (db-primary fence $db_fence, cache-cluster fence $cache_fence)" >&2
