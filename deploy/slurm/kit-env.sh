# Sourced by the Slurm scripts (submit.sh, grade.sbatch, merge.sbatch): PYTHON is the kit's own
# virtualenv, $CH34_KIT/.venv/bin/python (`make setup` makes it), or CH34_PYTHON where given; its
# bin/ goes first on PATH, since nbgrader runs alembic and jupyter by name. No activated
# environment is needed, and an activated one is not what runs the jobs.
# shellcheck shell=sh
if [ -z "${CH34_KIT:-}" ]; then
  echo "error: CH34_KIT is not set: the kit's checkout on every node (submit.sh sets it)" >&2
  exit 2
fi
PYTHON="${CH34_PYTHON:-$CH34_KIT/.venv/bin/python}"
if [ ! -x "$PYTHON" ]; then
  echo "error: no $PYTHON on $(hostname): run \`make setup\` in $CH34_KIT (a folder every node sees), or set CH34_PYTHON to a python that has requirements.txt" >&2
  exit 2
fi
PATH="$(dirname "$PYTHON"):$PATH"
export PYTHON PATH
