#!/bin/sh
# The merge that follows the shards (a Kubernetes Job, a Slurm job with --dependency=afterok):
# $CH34_DATA/shards/shard-0 .. shard-(SHARDS-1) into $CH34_DATA/report. Exits 5 naming the
# students of a shard that is missing or unfinished (rerun that shard, then this).
set -eu
: "${SHARDS:?set SHARDS to the number of shards}"
DATA="${CH34_DATA:-/data}"
cd "$(dirname "$0")/.."
set --
k=0
while [ "$k" -lt "$SHARDS" ]; do set -- "$@" "$DATA/shards/shard-$k"; k=$((k + 1)); done
exec "${PYTHON:-python}" -m grader.kit.cluster.merge --report "$DATA/report" "$@"
