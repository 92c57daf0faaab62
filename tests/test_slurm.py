"""The Slurm engine (deploy/slurm/). Fast: the scripts' own errors (the usage line, a missing
.venv, a missing export, setup-node.sh's refusals) and shellcheck over them. Heavy, for real: a
one-node cluster brought up by deploy/slurm/setup-node.sh --dir under a temporary folder
(Debian's slurm-wlm and munge), the bundled examples submitted by submit.sh as two shards with
no activated environment on PATH, first shard 0 alone (the merge runs anyway and names the
missing students: it never waits forever), then shard 1 (the merge completes), and the merged
report compared with a single run's. Where Slurm cannot be had, the test says why and skips."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, autograde
from tests.test_shards import assert_same_report

SLURM = REPO_ROOT / "deploy" / "slurm"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")


def run(command, env=None, **kwargs):
    return subprocess.run(command, env={"PATH": SYSTEM_PATH, **(env or {})}, capture_output=True,
                          text=True, timeout=600, **kwargs)  # fmt: skip


def test_submit_without_a_shard_count_prints_its_usage_with_every_variable():
    submitted = run([str(SLURM / "submit.sh")])
    assert submitted.returncode == 2
    assert submitted.stderr.startswith("usage: CH34_DATA=")
    for knob in ("EXPORT", "ROSTER", "JOBS", "CPUS_PER_SHARD", "MEM_PER_SHARD", "TIME_LIMIT",
                 "PARTITION", "CH34_KIT", "CH34_PYTHON", "CH34_COURSE", "[K ...]"):  # fmt: skip
        assert knob in submitted.stderr


def test_submit_refuses_a_shard_outside_the_count(tmp_path):
    submitted = run([str(SLURM / "submit.sh"), "2", "2"], {"CH34_DATA": str(tmp_path)})
    assert submitted.returncode == 2
    assert "shard 2 does not exist: N=2 shards are 0..1" in submitted.stderr


def test_submit_without_an_export_says_where_it_looked(tmp_path):
    submitted = run([str(SLURM / "submit.sh"), "2"], {"CH34_DATA": str(tmp_path)})
    assert submitted.returncode == 2
    assert f"no export at {tmp_path}/export" in submitted.stderr


def test_submit_without_the_kits_venv_says_run_make_setup_before_submitting(tmp_path):
    """A checkout without .venv (no `make setup`): refused before anything reaches Slurm."""
    kit = tmp_path / "kit"
    shutil.copytree(REPO_ROOT / "deploy", kit / "deploy")
    (tmp_path / "export").mkdir()
    submitted = run([str(kit / "deploy" / "slurm" / "submit.sh"), "2"],
                    {"CH34_DATA": str(tmp_path)})  # fmt: skip
    assert submitted.returncode == 2
    assert f"no {kit}/.venv/bin/python" in submitted.stderr
    assert "make setup" in submitted.stderr
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("job", ["grade.sbatch", "merge.sbatch"])
def test_a_job_on_a_node_without_the_kits_venv_says_run_make_setup(job, tmp_path):
    """The job as sbatch runs it (a copy of the script, no activated environment), on a node
    whose checkout has no .venv."""
    kit = tmp_path / "kit"
    shutil.copytree(REPO_ROOT / "deploy", kit / "deploy")
    ran = run(["sh", str(SLURM / job)], {"CH34_KIT": str(kit), "SLURM_ARRAY_TASK_ID": "0",
                                         "SHARDS": "2", "CH34_DATA": str(tmp_path)})  # fmt: skip
    assert ran.returncode == 2
    assert f"no {kit}/.venv/bin/python" in ran.stderr and "make setup" in ran.stderr
    assert "jupytext" not in ran.stderr


def test_a_job_without_ch34_kit_names_it():
    ran = run(["sh", str(SLURM / "grade.sbatch")])
    assert ran.returncode != 0 and "CH34_KIT" in ran.stderr


def test_setup_node_prints_its_usage_and_refuses_an_unknown_option():
    helped = run(["bash", str(SLURM / "setup-node.sh"), "--help"])
    assert helped.returncode == 0 and helped.stdout.startswith("usage: setup-node.sh")
    wrong = run(["bash", str(SLURM / "setup-node.sh"), "--dri", "x"])
    assert wrong.returncode == 1
    assert "unknown argument '--dri'" in wrong.stderr and "usage:" in wrong.stderr


def test_setup_node_refuses_to_run_as_another_user_than_root():
    command = ["bash", str(SLURM / "setup-node.sh"), "--dir", "/nonexistent/ch34"]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("no setpriv to drop root")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    ran = run(command)
    assert ran.returncode == 1 and "run it as root" in ran.stderr
    assert not Path("/nonexistent/ch34").exists()


SCRIPTS = ["setup-node.sh", "submit.sh", "kit-env.sh", "grade.sbatch", "merge.sbatch",
           "../run-shard.sh", "../run-merge.sh"]  # fmt: skip


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_slurm_script_passes_shellcheck(script):
    if shutil.which("shellcheck") is None:
        pytest.skip("no shellcheck: apt-get install shellcheck")
    checked = run(["shellcheck", "-x", str(SLURM / script)], cwd=REPO_ROOT)
    assert checked.returncode == 0, checked.stdout


# ---- the heavy tier: a real cluster ---------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def slurm(tmp_path):
    """The environment (SLURM_CONF) of a one-node cluster that setup-node.sh brought up under
    tmp_path/slurm (installing slurm-wlm and munge first where they are missing); stopped after."""
    if os.geteuid() != 0:
        pytest.skip("setup-node.sh starts slurmd, which runs jobs as their users: root only")
    if shutil.which("slurmd") is None and shutil.which("apt-get") is None:
        pytest.skip("no Slurm and no apt-get to install it (slurm-wlm, munge)")
    folder = tmp_path / "slurm"
    env = {"SLURMCTLD_PORT": str(free_port()), "SLURMD_PORT": str(free_port())}
    setup = SLURM / "setup-node.sh"
    try:
        up = run(["bash", str(setup), "--dir", str(folder)], env)
        if up.returncode != 0:
            pytest.skip(f"setup-node.sh could not bring Slurm up here:\n{up.stdout}{up.stderr}")
        assert "Slurm is up" in up.stdout
        again = run(["bash", str(setup), "--dir", str(folder)], env)
        assert again.returncode == 0 and "wrote" not in again.stdout, "not idempotent"
        yield {"SLURM_CONF": str(folder / "slurm.conf")}
    finally:
        run(["bash", str(setup), "--dir", str(folder), "--stop"], env)


def job_state(job: str, env: dict) -> str:
    shown = run(["scontrol", "show", "job", job], env)
    states = {
        part.split("=", 1)[1] for part in shown.stdout.split() if part.startswith("JobState=")
    }
    return ",".join(sorted(states)) or "gone"


def submit_and_wait(env: dict, *shards: str) -> tuple[str, str]:
    """submit.sh 2 [shards], then the merge's final state and its log."""
    submitted = run([str(SLURM / "submit.sh"), "2", *shards], env)
    assert submitted.returncode == 0, submitted.stderr
    array, merge = re.findall(r"job (\d+)", submitted.stdout)
    deadline = time.monotonic() + 1500
    while job_state(merge, env) not in FINISHED and time.monotonic() < deadline:
        time.sleep(3)
    state = job_state(merge, env)
    logs = Path(env["CH34_DATA"]) / "logs"
    merge_log = (logs / f"merge.job{merge}.out").read_text(errors="replace")
    shard_logs = "\n".join(
        p.read_text(errors="replace") for p in logs.glob(f"shard-*.job{array}.out")
    )
    assert state in FINISHED, f"merge {state} after 25 min; shards {job_state(array, env)}"
    return state, merge_log + "\n" + shard_logs[-4000:]


@pytest.mark.slow
@pytest.mark.heavy
def test_slurm_shards_and_merge_from_a_bare_node_equal_one_run(slurm, fresh_build, tmp_path):
    course = fresh_build / "build" / "grading-course"
    data = tmp_path / "data"
    run([str(REPO_ROOT / ".venv" / "bin" / "python"), "-m", "grader.kit.authoring.examples",
         str(data / "export")], cwd=REPO_ROOT).check_returncode()  # fmt: skip
    # No activated environment: the jobs find the kit's .venv through CH34_KIT alone.
    env = {**slurm, "CH34_DATA": str(data), "CH34_COURSE": str(course), "CPUS_PER_SHARD": "1"}

    state, log = submit_and_wait(env, "0")
    assert state == "FAILED", log
    assert "shard 1/2" in log and "deploy/slurm/submit.sh 2 <the shards" in log, log
    assert not (data / "report").exists()

    state, log = submit_and_wait(env, "1")
    assert state == "COMPLETED", log
    single = autograde(data / "export", tmp_path / "single", course, 1)[0]
    assert single.returncode == 0, single.stderr[-3000:]
    assert_same_report(tmp_path / "single", data / "report")
