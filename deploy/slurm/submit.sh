#!/bin/sh
# Grade a class on Slurm: N shards as one array job, then the merge once all ended well.
#   CH34_DATA=/shared/ch34 deploy/slurm/submit.sh 4      (the export at $CH34_DATA/export)
# Prints the two job ids; the merged report lands in $CH34_DATA/report.
set -eu
N="${1:?usage: submit.sh N (the number of shards)}"
here="$(cd "$(dirname "$0")" && pwd)"
export CH34_KIT="${CH34_KIT:-$(dirname "$(dirname "$here")")}" SHARDS="$N"
: "${CH34_DATA:?set CH34_DATA to a folder every node sees (the export at \$CH34_DATA/export)}"
export CH34_DATA
cd "$CH34_DATA"
array=$(sbatch --parsable --export=ALL --array=0-$((N - 1)) "$here/grade.sbatch")
merge=$(sbatch --parsable --export=ALL --dependency=afterok:"${array%%;*}" "$here/merge.sbatch")
echo "$array $merge"
