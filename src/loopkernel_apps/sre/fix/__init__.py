"""The SRE write tools, a server of their own: a remediation carried out, once per key.

``python -m loopkernel_apps.sre.fix --namespace NS (--api URL | [--kubeconfig F] [--context C])``

::

    rollout_restart  a deployment's pods restarted (the template's restartedAt annotation)
    scale            a deployment's replicas
    set_image        one container's image of a deployment (back to the previous revision's)
    patch            one container's limits or requests, or one of its probes' timing
    delete_pod       one pod (its controller recreates it)

Every tool is ``irreversible`` and ``dedupesByKey`` (``tool-defs.json``): the tool layer's
policy parks the call until it is approved, and the effect journal sends it with its
idempotency key; a call killed in flight is sent again under the same key (the server's
record answers it), and one an operator re-sends (``KEY/resend/N``) is the same call. The read
tools' server (``loopkernel_apps.sre.tools``) has none of these, and an investigation
starts only that one.

**Once per key, on the cluster's side too.** A deployment write is one merge patch that
carries the change, the object's ``resourceVersion`` as read (another writer in between is
a ``409``, read again and retried up to ``CONFLICT_RETRIES`` times) and the call's key, in
the annotation ``FIX_KEY``. A call whose key the object already carries was applied by an
earlier attempt whose answer was lost (a kill between the request and its journaled
answer): nothing is written, and it is answered as the first attempt was (``applied: true``,
the object as it is), so the run's journal ends the same as if it had never been killed
(its digest too). ``applied`` says that the change this key names is on the object. A pod
holds no key once deleted, so ``delete_pod`` answers by the state it asks for: a pod
already gone (a re-send after an answer lost to a kill, or deleted by someone else) is
answered as the first send was, ``applied: true`` and ``exists: false``. Each answer
holds the object as re-read after the write, so the caller can say whether the fix took.
Errors: ``403``, ``404``, ``422`` are ``ToolError`` naming the status; an unreachable API
server is a transient fault.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loopkernel import JSON, ToolError
from loopkernel.tools import CallInfo, ToolDefs, ToolHost, load_tool_defs

__all__ = ["CONFLICT_RETRIES", "DEFS", "FIX_KEY", "build_host", "main"]

DEFS = Path(__file__).with_name("tool-defs.json")
FIX_KEY = "loopkernel.dev/fix-key"
"""The annotation holding the key of the last fix applied to a deployment."""
CONFLICT_RETRIES = 3
_MERGE = "application/merge-patch+json"


@functools.cache
def _defs() -> ToolDefs:
    return load_tool_defs(DEFS)


class Cluster:
    """The namespace's deployments and pods through the official client."""

    def __init__(self, api: Any, namespace: str) -> None:
        from kubernetes import client

        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.ns = namespace
        self.api = api

    def _raw(self, obj: Any) -> dict[str, Any]:
        out: dict[str, Any] = self.api.sanitize_for_serialization(obj)
        return out

    def deployment(self, name: str) -> dict[str, Any]:
        return self._raw(self.apps.read_namespaced_deployment(name, self.ns))

    def patch(self, name: str, body: dict[str, Any]) -> None:
        self.apps.patch_namespaced_deployment(name, self.ns, body, _content_type=_MERGE)

    def delete_pod(self, name: str) -> None:
        self.core.delete_namespaced_pod(name, self.ns)


Change = Callable[[dict[str, Any], dict[str, JSON]], dict[str, Any]]
"""The patch a tool makes of a deployment as read, for its arguments."""


def _restart(dep: dict[str, Any], args: dict[str, JSON]) -> dict[str, Any]:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    note = {"kubectl.kubernetes.io/restartedAt": at}
    return {"spec": {"template": {"metadata": {"annotations": note}}}}


def _image(dep: dict[str, Any], args: dict[str, JSON]) -> dict[str, Any]:
    containers = dep["spec"]["template"]["spec"]["containers"]
    if not any(c["name"] == args["container"] for c in containers):
        names = [c["name"] for c in containers]
        raise ToolError(f"deployment has no container {args['container']!r} ({names})")
    new = [{**c, "image": args["image"]} if c["name"] == args["container"] else c
           for c in containers]  # fmt: skip
    return {"spec": {"template": {"spec": {"containers": new}}}}


def _patched(c: dict[str, Any], args: dict[str, JSON]) -> dict[str, Any]:
    """Container ``c`` with the fields ``args`` names changed, the others as they are."""
    out = dict(c)
    for part in ("limits", "requests"):
        if isinstance(change := args.get(part), dict):
            res = dict(out.get("resources") or {})
            res[part] = {**(res.get(part) or {}), **change}
            out["resources"] = res
    if isinstance(probe := args.get("probe"), dict):
        kind, fields = str(probe["kind"]), probe["set"]
        if not isinstance(out.get(kind), dict):
            raise ToolError(f"container {c['name']!r} has no {kind} to patch")
        out[kind] = {**out[kind], **(fields if isinstance(fields, dict) else {})}
    return out


def _patch(dep: dict[str, Any], args: dict[str, JSON]) -> dict[str, Any]:
    containers = dep["spec"]["template"]["spec"]["containers"]
    if not any(c["name"] == args["container"] for c in containers):
        names = [c["name"] for c in containers]
        raise ToolError(f"deployment has no container {args['container']!r} ({names})")
    # A merge patch replaces a list whole: the containers as read, the one changed.
    new = [_patched(c, args) if c["name"] == args["container"] else c for c in containers]
    return {"spec": {"template": {"spec": {"containers": new}}}}


def _replicas(dep: dict[str, Any], args: dict[str, JSON]) -> dict[str, Any]:
    return {"spec": {"replicas": args["replicas"]}}


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = spec.get("template", {}).get("spec", {}).get("containers", [])
    return found


_SHOWN = ("resources", "livenessProbe", "readinessProbe", "startupProbe")
"""What the answer keeps of each container besides its image (the re-check reads them)."""


def _answer(source: str, applied: bool, obj: dict[str, Any] | None) -> dict[str, JSON]:
    meta = (obj or {}).get("metadata", {})
    spec, status = (obj or {}).get("spec", {}), (obj or {}).get("status", {})
    data: dict[str, JSON] = {
        "resourceVersion": meta.get("resourceVersion"),
        "generation": meta.get("generation"),
        "replicas": spec.get("replicas"),
        "images": [c.get("image") for c in _containers(spec)],
        "containers": {
            str(c.get("name")): {k: c[k] for k in _SHOWN if k in c} for c in _containers(spec)
        },
        "observedGeneration": status.get("observedGeneration"),
        "readyReplicas": status.get("readyReplicas"),
        "exists": obj is not None,
    }
    what = "applied" if applied else "nothing to apply"
    return {"source": source, "content": f"{source}: {what}", "applied": applied, "data": data}


def _api_error(exc: Exception, source: str) -> Exception:
    status = getattr(exc, "status", None)
    if status in (403, 404, 422, 400, 415):
        reason = getattr(exc, "reason", "")
        return ToolError(f"{source}: the API server answered {status} {reason}")
    return exc


def _write_deployment(
    cluster: Cluster, change: Change, args: dict[str, JSON], key: str | None
) -> dict[str, JSON]:
    from kubernetes.client.exceptions import ApiException

    name = str(args["deployment"])
    source = f"patch deployment {cluster.ns}/{name}"
    key = None if key is None else key.split("/resend/")[0]  # one call, however re-sent
    for _ in range(CONFLICT_RETRIES + 1):
        try:
            dep = cluster.deployment(name)
            if key is not None and dep["metadata"].get("annotations", {}).get(FIX_KEY) == key:
                return _answer(source, True, dep)  # applied by an earlier attempt: the same answer
            rv = dep["metadata"]["resourceVersion"]
            mark = {"metadata": {"resourceVersion": rv, "annotations": {FIX_KEY: key}}}
            # One patch: the change and its key land together or not at all.
            cluster.patch(name, {**change(dep, args), **mark})
            return _answer(source, True, cluster.deployment(name))
        except ApiException as exc:
            if exc.status != 409:
                raise _api_error(exc, source) from None
    raise ToolError(f"{source}: still conflicting after {CONFLICT_RETRIES} re-reads")


def _delete_pod(cluster: Cluster, args: dict[str, JSON]) -> dict[str, JSON]:
    from kubernetes.client.exceptions import ApiException

    source = f"delete pod {cluster.ns}/{args['pod']}"
    try:
        cluster.delete_pod(str(args["pod"]))
    except ApiException as exc:
        if exc.status != 404:
            raise _api_error(exc, source) from None
        # gone: deleted by an earlier attempt whose answer was lost (or by someone else).
        # What this call asks for holds, so it is answered as the first send was: a resumed
        # run's journal ends the same as if it had never been killed.
    return _answer(source, True, None)


_CHANGES: dict[str, Change] = {
    "rollout_restart": _restart,
    "set_image": _image,
    "scale": _replicas,
    "patch": _patch,
}


def build_host(api: Any, namespace: str) -> ToolHost:
    """The write tools over the client ``api``, in ``namespace`` only."""
    host = ToolHost(_defs())
    cluster = Cluster(api, namespace)
    for tool, change in _CHANGES.items():

        def handler(args: dict[str, JSON], call: CallInfo, change: Change = change) -> JSON:
            return _write_deployment(cluster, change, args, call.key)

        host.add(tool, handler)
    host.add("delete_pod", lambda args, call: _delete_pod(cluster, args))
    host.check_complete()
    return host


def client_for(api_url: str | None, kubeconfig: str | None, context: str | None) -> Any:
    """The official client: straight to ``api_url``, or from a kubeconfig."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise ToolError(
            "the fix server needs the kubernetes client: pip install 'loopkernel[sre-live]'"
        ) from None
    if api_url:
        conf = client.Configuration()
        conf.host = api_url
        return client.ApiClient(conf)
    return config.new_client_from_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loopkernel_apps.sre.fix")
    parser.add_argument("--namespace", required=True, help="the only namespace written")
    parser.add_argument("--api", help="the API server's URL (no kubeconfig)")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    args = parser.parse_args(argv)
    api = client_for(args.api, args.kubeconfig, args.context)
    build_host(api, args.namespace).run()
    return 0
