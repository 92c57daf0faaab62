#!/usr/bin/env bash
# Grade a class on Slurm (docs/cluster.md, "Slurm"): the shards as one array job, then a merge
# that starts when every shard has ended, well or not, and writes $CH34_DATA/report (or names
# the students of a failed shard and exits 5). Shard numbers after N submit only those shards
# again (a rerun resumes where the shard stopped) and a merge after them.
# shellcheck disable=SC2016  # the usage names variables, it expands none
usage='usage: CH34_DATA=<folder every node sees> [EXPORT=export] [ROSTER=<roster.csv>] [JOBS=<n>]
         [CPUS_PER_SHARD=2] [MEM_PER_SHARD=<e.g. 8G>] [TIME_LIMIT=<e.g. 6:00:00>] [PARTITION=<name>]
         deploy/slurm/submit.sh N [K ...]
  N          the number of shards; K ...: submit only these shards (0..N-1) again, then a merge
  CH34_DATA  holds the export and receives shards/shard-K, report/ and logs/
  EXPORT     the class export, a folder or .zip (under CH34_DATA unless absolute; default export)
  ROSTER     the roster CSV (under CH34_DATA unless absolute; default: none)
  JOBS       notebooks graded at once in a shard (default: CPUS_PER_SHARD)
  CPUS_PER_SHARD, MEM_PER_SHARD, TIME_LIMIT, PARTITION: what each shard asks of Slurm
  CH34_KIT   this checkout, as every node sees it (default: the one holding this script)
  CH34_PYTHON  default $CH34_KIT/.venv/bin/python (make setup); CH34_COURSE  default $CH34_KIT/build/grading-course'
set -euo pipefail
die() { echo "submit.sh: error: $*" >&2; exit 2; }
case "${1:-}" in
  -h|--help) echo "$usage"; exit 0 ;;
  ''|*[!0-9]*|0) echo "$usage" >&2; exit 2 ;;
esac
N="$1"; shift
for K in "$@"; do
  case "$K" in ''|*[!0-9]*) die "shard '$K' is not a number (0..$((N - 1)))" ;; esac
  [ "$K" -lt "$N" ] || die "shard $K does not exist: N=$N shards are 0..$((N - 1))"
done

here="$(cd "$(dirname "$0")" && pwd)"
CH34_KIT="${CH34_KIT:-$(dirname "$(dirname "$here")")}"
export CH34_KIT
[ -n "${CH34_DATA:-}" ] || die "set CH34_DATA to a folder every node sees (the export in it)
$usage"
[ -d "$CH34_DATA" ] || die "CH34_DATA=$CH34_DATA is not a folder"
CH34_DATA="$(cd "$CH34_DATA" && pwd)"
# A relative EXPORT or ROSTER is under CH34_DATA (deploy/run-shard.sh reads them so).
under_data() { case "$1" in /*) echo "$1" ;; *) echo "$CH34_DATA/$1" ;; esac; }
EXPORT="${EXPORT:-export}"
[ -e "$(under_data "$EXPORT")" ] || die "no export at $(under_data "$EXPORT"): put the class's export (folder or .zip) there, or set EXPORT"
if [ -n "${ROSTER:-}" ]; then
  [ -f "$(under_data "$ROSTER")" ] || die "no roster at $(under_data "$ROSTER") (ROSTER=$ROSTER)"
fi
# shellcheck source=deploy/slurm/kit-env.sh
. "$here/kit-env.sh"
course="${CH34_COURSE:-$CH34_KIT/build/grading-course}"
[ -f "$course/gradebook.db" ] || die "no grading course at $course: run \`make notebooks\` in $CH34_KIT first"
command -v sbatch >/dev/null 2>&1 || die "no sbatch here: install Slurm, or bring up one node with sudo $here/setup-node.sh"

CPUS_PER_SHARD="${CPUS_PER_SHARD:-2}"
export SHARDS="$N" CH34_DATA EXPORT ROSTER="${ROSTER:-}" JOBS="${JOBS:-$CPUS_PER_SHARD}"
mkdir -p "$CH34_DATA/logs"
tasks="0-$((N - 1))"
[ $# = 0 ] || tasks="$(IFS=,; echo "$*")"
# What every job asks for; the environment above goes with the jobs (--export=ALL).
common=(--parsable --export=ALL --chdir="$CH34_DATA")
[ -z "${PARTITION:-}" ] || common+=(--partition="$PARTITION")
[ -z "${TIME_LIMIT:-}" ] || common+=(--time="$TIME_LIMIT")
shard_options=(--cpus-per-task="$CPUS_PER_SHARD" --output="$CH34_DATA/logs/shard-%a.job%A.out")
[ -z "${MEM_PER_SHARD:-}" ] || shard_options+=(--mem="$MEM_PER_SHARD")
array="$(sbatch "${common[@]}" "${shard_options[@]}" --array="$tasks" "$here/grade.sbatch")"
array="${array%%;*}"  # --parsable: "id" or "id;cluster"
# afterany: the merge runs once every task has ended, failed ones too, and names what is
# missing; a dependency that can never be met (the array cancelled before it was known) kills
# the merge instead of leaving it pending forever.
merge="$(sbatch "${common[@]}" --cpus-per-task=1 --output="$CH34_DATA/logs/merge.job%j.out" \
  --dependency=afterany:"$array" --kill-on-invalid-dep=yes "$here/merge.sbatch")"
merge="${merge%%;*}"
echo "shards: job $array (tasks $tasks of $N), logs in $CH34_DATA/logs"
echo "merge: job $merge (once the shards have ended), the report in $CH34_DATA/report"
echo "watch: squeue -j $array,$merge"
