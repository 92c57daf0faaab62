"""The cluster engines' files (deploy/): the Kubernetes Jobs valid against Kubernetes' own schema
(offline: kubernetes-validate bundles the schemas), an Indexed Job whose index is the shard, and
the Slurm scripts; the Jobs' commands are run as their pods run them by tests/test_shards.py."""

from __future__ import annotations

import subprocess

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
KUBERNETES = "1.30.0"  # the oldest version whose Job has backoffLimitPerIndex enabled by default


def manifest(name: str) -> dict:
    return yaml.safe_load((DEPLOY / "k8s" / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["grade-shards.yaml", "merge.yaml"])
def test_each_job_is_valid_against_the_kubernetes_schema(name):
    kubernetes_validate.validate(manifest(name), KUBERNETES, strict=True)
    kubernetes_validate.validate(manifest(name), kubernetes_validate.latest_version(), strict=True)


def test_the_validator_rejects_a_misspelt_field():
    job = manifest("grade-shards.yaml")
    job["spec"]["completionMod"] = job["spec"].pop("completionMode")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES, strict=True)


def test_the_shards_are_an_indexed_job_with_one_pod_per_shard_and_the_merge_counts_them_all():
    spec = manifest("grade-shards.yaml")["spec"]
    assert spec["completionMode"] == "Indexed"
    env = {e["name"]: e["value"] for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert spec["completions"] == spec["parallelism"] == int(env["SHARDS"])
    merge = manifest("merge.yaml")["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e["value"] for e in merge["env"]}["SHARDS"] == env["SHARDS"]
    script = (DEPLOY / "run-shard.sh").read_text(encoding="utf-8")
    assert "JOB_COMPLETION_INDEX" in script and "SLURM_ARRAY_TASK_ID" in script


def test_a_shard_task_without_an_index_says_which_variable_to_set(tmp_path):
    run = subprocess.run(
        ["sh", str(DEPLOY / "run-shard.sh")], capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "SHARDS": "2", "CH34_DATA": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode != 0
    assert "JOB_COMPLETION_INDEX" in run.stderr and "SLURM_ARRAY_TASK_ID" in run.stderr


SCRIPTS = ["run-shard.sh", "run-merge.sh", "slurm/grade.sbatch", "slurm/merge.sbatch",
           "slurm/submit.sh", "slurm/setup-node.sh", "slurm/kit-env.sh", "gradescope/setup.sh",
           "gradescope/run_autograder"]  # fmt: skip


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_cluster_script_is_valid_shell_for_the_shell_that_runs_it(script):
    """Parsed (-n) by the shell its first line names (sh where it names none: a sourced file)."""
    first = (DEPLOY / script).read_text(encoding="utf-8").splitlines()[0]
    shell = "bash" if first.endswith("bash") else "sh"
    run = subprocess.run([shell, "-n", str(DEPLOY / script)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
