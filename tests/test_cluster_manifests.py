"""The cluster engines' files (deploy/): the Kubernetes manifests valid against Kubernetes' own
schema (offline: kubernetes-validate bundles the schemas), an Indexed Job whose index is the
shard, one volume and one image for every pod, the export and roster read where the data pod's
instructions copy them, and every script parsed by its shell; the Jobs' commands are run as their
pods run them by tests/test_shards.py, the Slurm scripts by tests/test_slurm.py."""

from __future__ import annotations

import re
import subprocess

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.test_shards import as_a_pod_runs

DEPLOY = REPO_ROOT / "deploy"
KUBERNETES = "1.30.0"  # the oldest version whose Job has backoffLimitPerIndex enabled by default


def manifest(name: str) -> dict:
    return yaml.safe_load((DEPLOY / "k8s" / name).read_text(encoding="utf-8"))


MANIFESTS = ["pvc.yaml", "data-pod.yaml", "grade-shards.yaml", "merge.yaml"]
PODS = ["data-pod.yaml", "grade-shards.yaml", "merge.yaml"]


def pod_spec(name: str) -> dict:
    thing = manifest(name)
    return thing["spec"] if thing["kind"] == "Pod" else thing["spec"]["template"]["spec"]


def test_every_manifest_in_deploy_k8s_is_tested():
    assert sorted(p.name for p in (DEPLOY / "k8s").glob("*.yaml")) == sorted(MANIFESTS)


@pytest.mark.parametrize("name", MANIFESTS)
def test_each_manifest_is_valid_against_the_kubernetes_schema(name):
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


def test_every_pod_mounts_the_one_claim_at_ch34_data_and_runs_the_one_image():
    claim = manifest("pvc.yaml")["metadata"]["name"]
    images = set()
    for name in PODS:
        spec = pod_spec(name)
        (container,) = spec["containers"]
        volumes = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
        assert mounts == {"/data": claim}, name
        env = {e["name"]: e["value"] for e in container.get("env", [])}
        assert env.get("CH34_DATA", "/data") == "/data", name
        images.add((container["image"], container["imagePullPolicy"]))
    assert len(images) == 1, f"one image for every pod, set in all three: {images}"


def test_the_shards_read_the_export_and_roster_where_the_data_pod_copies_them():
    env = {e["name"]: e["value"] for e in pod_spec("grade-shards.yaml")["containers"][0]["env"]}
    copied = re.findall(
        r"kubectl cp \S+ ch34-data:/data/(\S+)", (DEPLOY / "k8s" / "data-pod.yaml").read_text()
    )
    assert [env["EXPORT"], env["ROSTER"]] == copied


def test_a_shard_pod_without_the_roster_on_the_volume_names_the_file_it_looked_for(tmp_path):
    """The shard Job's own command and environment: ROSTER is read from the volume (/data here
    a temporary folder holding the export alone), and its absence is the error."""
    (tmp_path / "export.zip").write_bytes(b"")
    run = as_a_pod_runs("grade-shards.yaml", {"CH34_DATA": str(tmp_path)}, index=0)
    assert run.returncode == 2
    assert f"roster {tmp_path}/roster.csv does not exist" in run.stderr


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
