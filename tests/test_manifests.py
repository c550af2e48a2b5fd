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
    """(path relative to examples/k8s, document) for every YAML document, subfolders too."""
    docs = []
    for path in sorted(K8S.rglob("*.y*ml")):
        name = path.relative_to(K8S).as_posix()
        docs += [(name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def by_kind(kind: str, file: str | None = None) -> dict[str, Any]:
    found = [d for name, d in documents()
             if d.get("kind") == kind and (file is None or name == file)]
    assert len(found) == 1, f"expected one {kind} in {file or K8S}"
    return found[0]


def named(kind: str, name: str) -> dict[str, Any]:
    found = [d for _, d in documents()
             if d.get("kind") == kind and d["metadata"].get("name") == name]
    assert len(found) == 1, f"expected one {kind} named {name} under {K8S}"
    return found[0]


def exit_code_actions(job: dict[str, Any]) -> set[tuple[str, int]]:
    rules = job["podFailurePolicy"]["rules"]
    return {(r["action"], c) for r in rules if "onExitCodes" in r
            for c in r["onExitCodes"]["values"] if r["onExitCodes"]["operator"] == "In"}


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
                                           "serviceaccount.yaml", "islands-job.yaml",
                                           "dask/ga-dask.yaml"}
    assert all(d.get("apiVersion") and d.get("kind") for _, d in docs)


def test_the_library_reads_the_variables_the_manifests_rely_on() -> None:
    """The grep of the package finds the three variables (so a rename breaks this test)."""
    assert library_env_names() >= REQUIRED


@pytest.mark.parametrize(("kind", "file"), [("Job", "job.yaml"),
                                            ("Workflow", "argo-workflow.yaml"),
                                            ("Job", "dask/ga-dask.yaml")])
def test_manifest_sets_the_library_variables(kind: str, file: str) -> None:
    """Job and Workflow set store, run id and signing key, and no unknown RESUMABLE_* name."""
    env = env_of(by_kind(kind, file))
    assert set(env) >= REQUIRED
    assert {n for n in env if n.startswith("RESUMABLE_")} <= library_env_names()
    assert env["RESUMABLE_STORE"]["value"].startswith("s3://")
    assert "secretKeyRef" in env["RESUMABLE_SIGNING_KEY"]["valueFrom"]


def test_job_run_id_comes_from_the_job_name() -> None:
    """Every pod of the Job gets the Job's name as run id through the downward API."""
    env = env_of(by_kind("Job", "job.yaml"))
    ref = env["RESUMABLE_RUN_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert ref in ("metadata.labels['batch.kubernetes.io/job-name']",
                   "metadata.labels['job-name']")


@pytest.mark.parametrize("file", ["job.yaml", "islands-job.yaml", "dask/ga-dask.yaml"])
def test_job_pod_failure_policy_uses_the_library_exit_codes(file: str) -> None:
    """FailJob on corrupt/tampered/serialization/config, Ignore on fenced and disruption."""
    job = by_kind("Job", file)["spec"]
    rules = job["podFailurePolicy"]["rules"]
    codes = exit_code_actions(job)
    assert {c for a, c in codes if a == "FailJob"} == FATAL
    assert {c for a, c in codes if a == "Ignore"} == {_errors.EXIT_FENCED}
    assert any(r["action"] == "Ignore" and {"type": "DisruptionTarget", "status": "True"} in
               r.get("onPodConditions", []) for r in rules)
    containers = {c["name"] for c in job["template"]["spec"]["containers"]}
    assert {r["onExitCodes"]["containerName"] for r in rules if "onExitCodes" in r} <= (
        containers)
    # The retriable codes must not be caught by a FailJob rule.
    assert not {_errors.EXIT_SIGTERM, _errors.EXIT_STORE} & {c for _, c in codes}
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert job.get("backoffLimit", job.get("backoffLimitPerIndex")) >= 1
    assert pod["terminationGracePeriodSeconds"] >= 30
    assert job["podReplacementPolicy"] == "Failed"


def test_job_service_account_carries_an_irsa_role() -> None:
    """The Job's service account is the one whose manifest has the IRSA annotation."""
    account = by_kind("ServiceAccount")
    for file in ("job.yaml", "islands-job.yaml", "dask/ga-dask.yaml"):
        pod = by_kind("Job", file)["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == account["metadata"]["name"]
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


def test_dockerfiles_ship_the_scaleout_examples() -> None:
    """The GA image carries islands.py; the Dask image installs the dask extra and ga_dask.py."""
    assert "examples/islands.py" in (K8S / "Dockerfile").read_text()
    dask = (K8S / "dask" / "Dockerfile").read_text()
    assert "dask]" in dask and "examples/ga_dask.py" in dask and "examples/ga.py" in dask
    entry = [line for line in dask.splitlines() if line.startswith("ENTRYPOINT")]
    assert entry and entry[0].split(None, 1)[1].startswith('["python"')


# --- Kubernetes' own API schemas -------------------------------------------------------------

kubernetes_validate = pytest.importorskip("kubernetes_validate")
# The oldest release where every field we use is GA (podReplacementPolicy: 1.34), and the
# newest whose schemas the installed kubernetes-validate ships.
K8S_VERSIONS = ["1.34.0", kubernetes_validate.latest_version()]
# Custom resources: kubernetes-validate ships only the built-in API's schemas.
CUSTOM = {"argoproj.io"}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(("file", "index"), [
    (name, i) for name in sorted({n for n, _ in documents()})
    for i in range(sum(1 for n, _ in documents() if n == name))])
def test_manifest_is_valid_for_the_kubernetes_api(file: str, index: int, version: str) -> None:
    """Each document validates (strict: no unknown fields) against the API's schema."""
    doc = [d for name, d in documents() if name == file][index]
    if doc["apiVersion"].split("/")[0] in CUSTOM:
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(doc, version, strict=True)
        return
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        pytest.fail(f"{file} ({doc['kind']} {doc['metadata'].get('name')}) is not a valid "
                    f"Kubernetes {version} object: {err.message} at "
                    f"{'.'.join(map(str, err.path))}")


def test_islands_job_is_an_indexed_job_of_one_pod_per_island() -> None:
    """Indexed, all islands at once, a retry budget per index, each island its own run id."""
    job = by_kind("Job", "islands-job.yaml")["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["backoffLimitPerIndex"] >= 1
    assert job["completions"] == job["parallelism"]
    container = job["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--islands") + 1] == str(job["completions"])
    assert container["command"][-1] == "/app/islands.py"
    env = env_of(by_kind("Job", "islands-job.yaml"))
    # Islands derive their run ids from the experiment and JOB_COMPLETION_INDEX: one shared
    # RESUMABLE_RUN_ID would make them all write the same run.
    assert "RESUMABLE_RUN_ID" not in env
    assert set(env) >= {"RESUMABLE_STORE", "RESUMABLE_SIGNING_KEY", "RESUMABLE_MIGRATION_TIMEOUT"}
    assert {n for n in env if n.startswith("RESUMABLE_")} <= library_env_names()
    assert float(env["RESUMABLE_MIGRATION_TIMEOUT"]["value"]) > (
        job["template"]["spec"]["terminationGracePeriodSeconds"])
    assert "$(EXPERIMENT)" in args and "EXPERIMENT" in env


def test_dask_driver_reaches_the_scheduler_service() -> None:
    """The driver's and the workers' scheduler address is the Service's name and port."""
    service = named("Service", "dask-scheduler")
    port = service["spec"]["ports"][0]["port"]
    address = f"tcp://{service['metadata']['name']}:{port}"
    env = env_of(by_kind("Job", "dask/ga-dask.yaml"))
    assert env["DASK_SCHEDULER_ADDRESS"]["value"] == address
    workers = named("Deployment", "dask-worker")["spec"]["template"]["spec"]["containers"][0]
    assert address in workers["command"]
    scheduler = named("Deployment", "dask-scheduler")["spec"]["template"]
    assert scheduler["metadata"]["labels"] == service["spec"]["selector"]
    assert str(port) in scheduler["spec"]["containers"][0]["command"]
    assert {"containerPort": port} in scheduler["spec"]["containers"][0]["ports"]
