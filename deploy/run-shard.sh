#!/bin/sh
# One shard of a class, as a cluster's task runs it (Kubernetes Indexed Job, Slurm array task).
# K comes from the cluster: JOB_COMPLETION_INDEX (Kubernetes) or SLURM_ARRAY_TASK_ID (Slurm).
# Variables: SHARDS=N (required); CH34_DATA (default /data) receives shards/shard-K; EXPORT, the
# class export, a folder or .zip (default export) and ROSTER, the roster CSV (default: none),
# both under CH34_DATA unless absolute; JOBS (default: the cores); CH34_COURSE (the grading
# course; default the kit's build/grading-course); PYTHON (default python).
set -eu
K="${JOB_COMPLETION_INDEX:-${SLURM_ARRAY_TASK_ID:-}}"
: "${K:?no shard index: set JOB_COMPLETION_INDEX (Kubernetes) or SLURM_ARRAY_TASK_ID (Slurm)}"
: "${SHARDS:?set SHARDS to the number of shards}"
DATA="${CH34_DATA:-/data}"
under_data() { case "$1" in /*) echo "$1" ;; *) echo "$DATA/$1" ;; esac; }
EXPORT="$(under_data "${EXPORT:-export}")"
ROSTER="${ROSTER:+$(under_data "$ROSTER")}"
cd "$(dirname "$0")/.."
exec "${PYTHON:-python}" -m grader.kit.autograde "$EXPORT" \
  --report "$DATA/shards/shard-$K" --shard "$K/$SHARDS" --jobs "${JOBS:-$(nproc)}" \
  ${ROSTER:+--roster "$ROSTER"} ${CH34_COURSE:+--course "$CH34_COURSE"}
