#!/bin/sh
# One shard of a class, as a cluster's task runs it (Kubernetes Indexed Job, Slurm array task).
# K comes from the cluster: JOB_COMPLETION_INDEX (Kubernetes) or SLURM_ARRAY_TASK_ID (Slurm).
# Reads $CH34_DATA/$EXPORT (default /data/export: a folder or .zip), writes the shard's report
# into $CH34_DATA/shards/shard-K. SHARDS=N is required; ROSTER (under $CH34_DATA), JOBS and
# CH34_COURSE (the grading course; default the kit's build/grading-course) are optional.
set -eu
K="${JOB_COMPLETION_INDEX:-${SLURM_ARRAY_TASK_ID:-}}"
: "${K:?no shard index: set JOB_COMPLETION_INDEX (Kubernetes) or SLURM_ARRAY_TASK_ID (Slurm)}"
: "${SHARDS:?set SHARDS to the number of shards}"
DATA="${CH34_DATA:-/data}"
cd "$(dirname "$0")/.."
exec "${PYTHON:-python}" -m grader.kit.autograde "$DATA/${EXPORT:-export}" \
  --report "$DATA/shards/shard-$K" --shard "$K/$SHARDS" --jobs "${JOBS:-$(nproc)}" \
  ${ROSTER:+--roster "$DATA/$ROSTER"} ${CH34_COURSE:+--course "$CH34_COURSE"}
