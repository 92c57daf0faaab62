"""The Slurm engine for real (heavy): a one-node Slurm cluster started by the test (Debian's
slurm-wlm and munge: munged, slurmctld and slurmd on this host, all under a temporary folder,
no cgroups), the bundled examples submitted by deploy/slurm/submit.sh as an array of two
shards and a merge that waits for them (--dependency=afterok), and the merged report compared
with a single run's. Where Slurm cannot start, the test says why and skips."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, autograde
from tests.test_shards import assert_same_report

pytestmark = [pytest.mark.slow, pytest.mark.heavy]
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def slurm_conf(root: Path, host: str) -> str:
    """A one-node cluster on `host`: no accounting, no cgroups (proctrack/linuxproc, task/none)."""
    cpus = os.cpu_count() or 1
    return f"""ClusterName=ch34test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CredType=cred/munge
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=ch34 Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def log_tail(root: Path) -> str:
    logs = [root / name for name in ("munged.log", "slurmctld.log", "slurmd.log")]
    return "\n".join(p.read_text(errors="replace")[-1500:] for p in logs if p.exists())


@pytest.fixture
def slurm(tmp_path):
    """{SLURM_CONF: ...} of a running one-node cluster; stopped afterwards."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.skip(f"no {', '.join(missing)}: apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as their users and must be started as root")
    root = tmp_path / "slurm"
    for folder in ("state", "spool"):
        (root / folder).mkdir(parents=True)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, host), encoding="utf-8")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    munge = ["munged", "--force", f"--socket={root}/munge.sock", f"--key-file={key}",
             f"--log-file={root}/munged.log", f"--pid-file={root}/munged.pid",
             f"--seed-file={root}/munged.seed"]  # fmt: skip
    try:
        for command in (munge, ["slurmctld"], ["slurmd"]):
            started = subprocess.run(command, env=env, capture_output=True, text=True)
            if started.returncode != 0:
                pytest.skip(f"{command[0]} did not start: {started.stderr}\n{log_tail(root)}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True,
                                   text=True)  # fmt: skip
            if state.stdout.strip() in ("idle", "mix", "alloc"):
                break
            time.sleep(1)
        else:
            pytest.skip(
                f"the node never became idle ({state.stdout}{state.stderr})\n{log_tail(root)}"
            )
        yield env
    finally:
        for pid_file in ("slurmd.pid", "slurmctld.pid"):
            path = root / pid_file
            if path.exists():
                subprocess.run(["kill", path.read_text().strip()], capture_output=True)
        subprocess.run(["munged", "--stop", f"--socket={root}/munge.sock"], capture_output=True)


def job_state(job: str, env: dict) -> str:
    shown = subprocess.run(
        ["scontrol", "show", "job", job], env=env, capture_output=True, text=True
    )
    states = {
        part.split("=", 1)[1] for part in shown.stdout.split() if part.startswith("JobState=")
    }
    return ",".join(sorted(states)) or "gone"


def test_a_slurm_array_of_shards_and_its_merge_equal_one_run(slurm, fresh_build, tmp_path):
    course = fresh_build / "build" / "grading-course"
    data = tmp_path / "data"
    subprocess.run(
        [sys.executable, "-m", "grader.kit.authoring.examples", str(data / "export")],
        cwd=REPO_ROOT, check=True, capture_output=True,
    )  # fmt: skip
    env = {**slurm, "CH34_DATA": str(data), "CH34_COURSE": str(course), "JOBS": "1",
           "PYTHON": sys.executable, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    submitted = subprocess.run(
        [str(REPO_ROOT / "deploy" / "slurm" / "submit.sh"), "2"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    array, merge = submitted.stdout.split()
    single = autograde(data / "export", tmp_path / "single", course, 1)[0]
    assert single.returncode == 0, single.stderr[-3000:]
    deadline = time.monotonic() + 1500
    while (
        job_state(merge, env) in ("PENDING", "RUNNING", "CONFIGURING")
        and time.monotonic() < deadline
    ):
        time.sleep(3)
    outputs = "\n".join(p.read_text() for p in sorted(data.glob("ch34-*.out")))
    assert job_state(merge, env) == "COMPLETED", f"array {job_state(array, env)}\n{outputs[-4000:]}"
    assert_same_report(tmp_path / "single", data / "report")
