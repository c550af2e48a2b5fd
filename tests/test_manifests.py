"""The Kubernetes examples name the env variables and exit codes the library really uses."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import resumable
from resumable import _errors

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "examples" / "k8s"
PACKAGE = Path(resumable.__file__).parent
REQUIRED = {"RESUMABLE_STORE", "RESUMABLE_RUN_ID", "RESUMABLE_SIGNING_KEY"}
FATAL = {_errors.EXIT_CORRUPT, _errors.EXIT_TAMPERED, _errors.EXIT_SERIALIZATION,
         _errors.EXIT_CONFIG}


def library_env_names() -> set[str]:
    """Every RESUMABLE_* name that appears as a string in the package's source."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        names.update(re.findall(r"""["'](RESUMABLE_[A-Z0-9_]+)["']""", path.read_text()))
    return names


def documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.y*ml")):
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def by_kind(kind: str) -> dict[str, Any]:
    found = [d for _, d in documents() if d.get("kind") == kind]
    assert len(found) == 1, f"expected one {kind} in {K8S}"
    return found[0]


def env_lists(node: Any) -> Iterator[list[dict[str, Any]]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "env" and isinstance(value, list):
                yield value
            else:
                yield from env_lists(value)
    elif isinstance(node, list):
        for item in node:
            yield from env_lists(item)


def env_of(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for env in env_lists(doc) for e in env}


def test_every_manifest_parses() -> None:
    """Each YAML file under examples/k8s loads and every document has apiVersion and kind."""
    docs = documents()
    assert {name for name, _ in docs} >= {"job.yaml", "argo-workflow.yaml",
                                           "serviceaccount.yaml"}
    assert all(d.get("apiVersion") and d.get("kind") for _, d in docs)


def test_the_library_reads_the_variables_the_manifests_rely_on() -> None:
    """The grep of the package finds the three variables (so a rename breaks this test)."""
    assert library_env_names() >= REQUIRED


@pytest.mark.parametrize("kind", ["Job", "Workflow"])
def test_manifest_sets_the_library_variables(kind: str) -> None:
    """Job and Workflow set store, run id and signing key, and no unknown RESUMABLE_* name."""
    env = env_of(by_kind(kind))
    assert set(env) >= REQUIRED
    assert {n for n in env if n.startswith("RESUMABLE_")} <= library_env_names()
    assert env["RESUMABLE_STORE"]["value"].startswith("s3://")
    assert "secretKeyRef" in env["RESUMABLE_SIGNING_KEY"]["valueFrom"]


def test_job_run_id_comes_from_the_job_name() -> None:
    """Every pod of the Job gets the Job's name as run id through the downward API."""
    ref = env_of(by_kind("Job"))["RESUMABLE_RUN_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert ref in ("metadata.labels['batch.kubernetes.io/job-name']",
                   "metadata.labels['job-name']")


def test_job_pod_failure_policy_uses_the_library_exit_codes() -> None:
    """FailJob on corrupt/tampered/serialization/config, Ignore on fenced and disruption."""
    job = by_kind("Job")["spec"]
    rules = job["podFailurePolicy"]["rules"]
    codes = {(r["action"], c) for r in rules if "onExitCodes" in r
             for c in r["onExitCodes"]["values"] if r["onExitCodes"]["operator"] == "In"}
    assert {c for a, c in codes if a == "FailJob"} == FATAL
    assert {c for a, c in codes if a == "Ignore"} == {_errors.EXIT_FENCED}
    assert any(r["action"] == "Ignore" and {"type": "DisruptionTarget"} in
               r.get("onPodConditions", []) for r in rules)
    # The retriable codes must not be caught by a FailJob rule.
    assert not {_errors.EXIT_SIGTERM, _errors.EXIT_STORE} & {c for _, c in codes}
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert job["backoffLimit"] >= 1 and pod["terminationGracePeriodSeconds"] >= 30


def test_job_service_account_carries_an_irsa_role() -> None:
    """The Job's service account is the one whose manifest has the IRSA annotation."""
    account = by_kind("ServiceAccount")
    assert by_kind("Job")["spec"]["template"]["spec"]["serviceAccountName"] == (
        account["metadata"]["name"])
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith(
        "arn:aws:iam::")


def test_argo_retry_expression_skips_the_fatal_exit_codes() -> None:
    """The Workflow retries everything except the fatal and fenced exit codes."""
    template = by_kind("Workflow")["spec"]["templates"][0]
    strategy = template["retryStrategy"]
    listed = re.search(r"in \[([0-9, ]+)\]", strategy["expression"])
    assert listed is not None
    assert {int(c) for c in listed.group(1).split(",")} == FATAL | {_errors.EXIT_FENCED}
    assert int(strategy["limit"]) >= 1
    assert "{{workflow.name}}" in env_of(template)["RESUMABLE_RUN_ID"]["value"]


def test_dockerfile_runs_python_as_pid_1() -> None:
    """Exec-form ENTRYPOINT, so the SIGTERM from Kubernetes reaches Python and gets a save."""
    text = (K8S / "Dockerfile").read_text()
    entry = [line for line in text.splitlines() if line.startswith("ENTRYPOINT")]
    assert entry and entry[0].split(None, 1)[1].startswith('["python"')
    assert "examples/ga.py" in text
