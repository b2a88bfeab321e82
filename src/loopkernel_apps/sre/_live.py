"""Live mode: read a cluster through the official ``kubernetes`` client, write a dump.

``collect(out)`` writes the ``kubectl cluster-info dump --output-directory`` layout that
``load_dump`` reads, plus ``NS/POD/logs-C-previous.txt`` for every container that
restarted (what ``kubectl logs --previous`` returns). Lists are fetched raw
(``_preload_content=False``), so the files hold the API server's JSON exactly, as kubectl
writes it. Needs the sre-live extra (``pip install -e '.[sre-live]'`` in a clone).

Beyond what ``kubectl cluster-info dump`` writes, it reads the kinds the dump lacks and the
investigator uses when present: Endpoints, PersistentVolumeClaims, HorizontalPodAutoscalers,
CronJobs, StatefulSets, Jobs, and ConfigMaps with their *keys only* (each value replaced by
``""``: a key that is missing is what a CreateContainerConfigError names, and values may hold
credentials). Secrets are never read. It writes init containers' logs too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopkernel import UsageError

__all__ = ["LISTS", "collect"]

# As loopkernel.errors.install_hint says it (the apps use the public API only).
LIVE_INSTALL = "pip install -e '.[sre-live]' in a clone (or the built wheel with [sre-live])"

LISTS = (
    ("events", "core", "list_namespaced_event"),
    ("pods", "core", "list_namespaced_pod"),
    ("services", "core", "list_namespaced_service"),
    ("replication-controllers", "core", "list_namespaced_replication_controller"),
    ("deployments", "apps", "list_namespaced_deployment"),
    ("replicasets", "apps", "list_namespaced_replica_set"),
    ("daemonsets", "apps", "list_namespaced_daemon_set"),
    ("statefulsets", "apps", "list_namespaced_stateful_set"),
    ("jobs", "batch", "list_namespaced_job"),
    ("cronjobs", "batch", "list_namespaced_cron_job"),
    ("endpoints", "core", "list_namespaced_endpoints"),
    ("persistentvolumeclaims", "core", "list_namespaced_persistent_volume_claim"),
    ("horizontalpodautoscalers", "autoscaling", "list_namespaced_horizontal_pod_autoscaler"),
    ("configmaps", "core", "list_namespaced_config_map"),
)
"""File stem, API group, client method: what is read per namespace."""


def _client(kubeconfig: str | None, context: str | None) -> Any:
    try:
        from kubernetes import config
    except ImportError:
        raise UsageError(
            f"live mode needs the kubernetes client: {LIVE_INSTALL}"
        ) from None
    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
    except Exception as exc:  # the client raises ConfigException, OSError, KeyError ...
        raise UsageError(f"cannot load the kubeconfig: {exc}") from None


def _raw(call: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    from kubernetes.client.exceptions import ApiException

    try:
        response = call(*args, _preload_content=False, **kw)
    except ApiException as exc:
        raise UsageError(
            f"the API server refused {call.__name__}: {exc.status} {exc.reason}"
        ) from None
    return response.data


def collect(
    out: str | Path,
    *,
    namespaces: list[str] | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> str:
    """Write a dump of ``namespaces`` (default: every namespace) to ``out``; a summary line."""
    api = _client(kubeconfig, context)
    try:
        return _collect(api, Path(out), namespaces, progress)
    finally:
        api.close()


def _collect(
    api: Any, root: Path, namespaces: list[str] | None, progress: Callable[[str], None]
) -> str:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    groups: dict[str, Any] = {"core": client.CoreV1Api(api), "apps": client.AppsV1Api(api),
              "batch": client.BatchV1Api(api),
              "autoscaling": client.AutoscalingV2Api(api)}  # fmt: skip
    core = groups["core"]
    root.mkdir(parents=True)
    (root / "nodes.json").write_bytes(_raw(core.list_node))
    if not namespaces:
        listed = json.loads(_raw(core.list_namespace))
        namespaces = sorted(i["metadata"]["name"] for i in listed.get("items", []))
    pods_n = logs_n = previous_n = 0
    for ns in namespaces:
        progress(f"namespace {ns}")
        ns_dir = root / ns
        ns_dir.mkdir()
        pods: list[dict[str, Any]] = []
        for stem, group, method in LISTS:
            data = _raw(getattr(groups[group], method), ns)
            if stem == "configmaps":
                data = _keys_only(data)
            (ns_dir / f"{stem}.json").write_bytes(data)
            if stem == "pods":
                pods = json.loads(data).get("items", [])
        for pod in pods:
            name = pod["metadata"]["name"]
            pod_dir = ns_dir / name
            pod_dir.mkdir()
            restarts = {
                s.get("name"): int(s.get("restartCount", 0))
                for s in pod.get("status", {}).get("containerStatuses", []) or []
            }
            blocks = []
            spec = pod.get("spec", {})
            for s in pod.get("status", {}).get("initContainerStatuses", []) or []:
                restarts[s.get("name")] = int(s.get("restartCount", 0))
            for c in (spec.get("initContainers") or []) + spec.get("containers", []):
                cname = c["name"]
                text = _log(core, name, ns, cname, previous=False)
                blocks.append(
                    f"==== START logs for container {cname} of pod {ns}/{name} ====\n{text}"
                    f"==== END logs for container {cname} of pod {ns}/{name} ====\n"
                )
                if restarts.get(cname, 0) > 0:
                    try:
                        prev = core.read_namespaced_pod_log(
                            name, ns, container=cname, previous=True, _preload_content=False
                        ).data.decode("utf-8", "replace")
                    except ApiException:
                        continue  # the previous instance is gone (node restarted, GC)
                    (pod_dir / f"logs-{cname}-previous.txt").write_text(prev)
                    previous_n += 1
                logs_n += 1
            (pod_dir / "logs.txt").write_text("".join(blocks))
            pods_n += 1
    return (
        f"{len(namespaces)} namespace(s), {pods_n} pod(s), {logs_n} log(s), {previous_n} previous"
    )


def _keys_only(data: bytes) -> bytes:
    """A ConfigMapList with every value replaced by ``""``: the keys, never the contents."""
    doc = json.loads(data)
    for item in doc.get("items", []) or []:
        for field in ("data", "binaryData"):
            if isinstance(item.get(field), dict):
                item[field] = {k: "" for k in item[field]}
    return json.dumps(doc).encode()


def _log(core: Any, pod: str, ns: str, container: str, *, previous: bool) -> str:
    from kubernetes.client.exceptions import ApiException

    try:
        data = core.read_namespaced_pod_log(
            pod, ns, container=container, previous=previous, _preload_content=False
        ).data
    except ApiException as exc:
        return f"(no log: {exc.status} {exc.reason})\n"
    text: str = data.decode("utf-8", "replace")
    return text if text.endswith("\n") or not text else text + "\n"
