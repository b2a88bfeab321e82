"""What to do about each verified cause: the next step and the proposed remediation.

One template per detector (``NEXT``, ``REMEDY``), filled by ``fmt`` from the finding and the
workload: a rollback is offered only when the newest revision changed something; a Job is
re-run and a Deployment restarted; a probe answered with HTTP 4xx gets "point the probe at a
path the container serves"; a pod waiting on a claim gets a StorageClass, never a node.
"""

from __future__ import annotations

import re
from typing import Any

from loopkernel_apps.sre._vocab import slots

__all__ = ["NEXT", "REMEDY", "fmt"]

NEXT = {
    "oomkilled": "Compare the container's working set with its limit {limit} "
    "(kubectl top pod {pod} --containers, or the memory graph of the last hour).",
    "crash_log_reason": "Read the full previous log of {container} "
    "(kubectl logs {pod} -c {container} --previous) around the quoted line.",
    "command_not_found": "Check the image's entrypoint and the container command "
    "(kubectl get pod {pod} -o jsonpath='{{.spec.containers[*].command}}').",
    "image_pull": "Check that {image} exists in the registry and the pull secret can read it.",
    "unschedulable": "Compare the pod's requests with the nodes' free allocatable "
    "(kubectl describe nodes) and check quotas.",
    "missing_env": "Check which ConfigMap or Secret should provide {variable} and whether "
    "the last rollout dropped it (kubectl rollout history).",
    "dns_resolution": "Check that the Service behind {host} exists in the namespace it names "
    "(kubectl get svc -A | grep ...) and that CoreDNS answers.",
    "cert_expired": "Check the expiry of the certificate the peer presents "
    "(openssl s_client -connect HOST:PORT | openssl x509 -noout -enddate).",
    "probe_failure": "Time the probed endpoint from inside the pod and compare it with the "
    "probe's timeout and initial delay.",
    "config_invalid": "Diff the configuration of the failing revision against the last "
    "working one (kubectl rollout history, the ConfigMap's history).",
    "init_container": "Read the init container's full log (kubectl logs {pod} -c {container} "
    "--previous) and check what it waits for.",
    "create_config_error": "Check that {object_kind} {object} exists in the namespace with the "
    "keys the pod references (kubectl get {object_kind_lower} {object} -o yaml).",
    "pvc_unbound": "Check the claim {claim} and the StorageClasses (kubectl get pvc {claim}; "
    "kubectl get storageclass): which class it asks for and whether one is the default.",
    "taint_untolerated": "List the nodes' taints (kubectl describe nodes | grep Taints) and "
    "decide whether the pod belongs on those nodes.",
    "evicted": "Check the node's {resource} (kubectl describe node {node}) and the pod's "
    "usage against its requests.",
    "node_not_ready": "Check the node {node} (kubectl describe node {node}; the kubelet's "
    "log on the node).",
    "service_no_endpoints": "Compare the Service's selector with the pods' labels "
    "(kubectl get svc {service} -o wide; kubectl get pods --show-labels; kubectl get endpoints "
    "{service}).",
    "upstream_unavailable": "Check {host} itself: its pods, its latency and error rate, its "
    "endpoints (kubectl get endpoints).",
    "job_deadline": "Compare how long the job's work takes with activeDeadlineSeconds "
    "({deadline}); read the last pod's log for where it was when it was stopped.",
    "failed_create": "Read the controller's events (kubectl describe {kind_lower} {object}) and "
    "the namespace's quotas and admission policies (kubectl describe resourcequota).",
    "hpa_at_max": "Check the workload's load against maxReplicas {max} (kubectl describe hpa "
    "{hpa}) and whether the nodes can hold more replicas.",
    "exit_completed": "Read the container's command and args (kubectl get pod {pod} -o "
    "jsonpath='{{.spec.containers[*].command}}'): what should keep running after it ends?",
    "exec_format_error": "Compare the image's architecture (docker manifest inspect {image}) "
    "with the nodes' (kubectl get nodes -L kubernetes.io/arch).",
    "failed_mount": "List what the pod's volumes reference (kubectl get pod {pod} -o "
    "jsonpath='{{.spec.volumes}}') against the namespace's Secrets and ConfigMaps.",
    "scaled_to_zero": "Check who scaled {kind_lower} {object} to 0 and why (kubectl rollout "
    "history {kind_lower}/{object}; the audit log; an autoscaler or a GitOps tool).",
    "preempted": "Compare the priority classes of {kind_lower} {object} and of its victims "
    "(kubectl get pods -o custom-columns=NAME:.metadata.name,PRIO:.spec.priorityClassName) "
    "with the nodes' free capacity.",
    "multi_attach": "See which pod holds the volume (kubectl get volumeattachments; kubectl "
    "get pods -o wide) and the workload's update strategy.",
}
REMEDY = {
    "oomkilled": "Raise the memory limit of container {container} above {limit}, "
    "or reduce its working set, then roll out",
    "crash_log_reason": "Fix what the quoted line names in container {container}{after}",
    "command_not_found": "Fix the command of container {container}: {binary!r} is not in the "
    "image{suggestion_text}",
    "image_pull": "{pull_fix}{rollback}",
    "unschedulable": "{schedule_fix}",
    "missing_env": "Define {variable} for container {container} (env or envFrom) and roll out"
    "{rollback}",
    "dns_resolution": "Point the service at a host name that resolves ({host} does not)",
    "cert_expired": "Renew the expired certificate (or the trust bundle), then {rerun}",
    "probe_failure": "{probe_fix}",
    "config_invalid": "Fix the configuration named in the quoted line, or roll back "
    "the revision that introduced it",
    "init_container": "Fix what init container {container} fails on (the quoted line); the "
    "pod's containers start once it exits 0",
    "create_config_error": "Create {object_kind} {object}{key_text} in the namespace, or fix "
    "the reference in the pod template",
    "pvc_unbound": "Give claim {claim} a StorageClass that exists (or make one the default), "
    "or create a PersistentVolume it can bind; adding a node does not help",
    "taint_untolerated": "Add a toleration for {taint_key} to the pod template if it belongs "
    "on those nodes, or remove the taint / add untainted capacity",
    "evicted": "Give the pod a {resource} request and limit that fits its use, and free "
    "{resource} on node {node}; the controller recreates evicted pods",
    "node_not_ready": "Restore node {node} (kubelet, network, cloud instance), or cordon and "
    "drain it so the pods are rescheduled elsewhere",
    "service_no_endpoints": "Make Service {service}'s selector ({selector}) match the pods' "
    "labels again (or relabel the pods)",
    "upstream_unavailable": "Fix {host} (the failing dependency); {probe_hint}",
    "job_deadline": "Raise activeDeadlineSeconds of job {job} above how long its work takes, "
    "or make the work faster; then re-run it",
    "failed_create": "{create_fix}",
    "hpa_at_max": "Raise maxReplicas of {hpa} (the nodes permitting), or make each replica "
    "handle more; it is capped at {max}",
    "exit_completed": "{vocab_remedy}",
    "exec_format_error": "{vocab_remedy}",
    "failed_mount": "{vocab_remedy}",
    "multi_attach": "{vocab_remedy}",
    "preempted": "Give {kind_lower} {object} its own capacity (a node pool, or a quota) or a "
    "lower priority, or give its victims a PriorityClass and capacity of their own; adding "
    "nodes lets both run",
    "scaled_to_zero": "Scale {kind_lower} {object} back up (kubectl scale {kind_lower}/{object} "
    "--replicas=N, N its usual count), and fix what set it to 0",
}


_CREATE_FIX = {
    "quota": "Raise the ResourceQuota the message names, or lower the pods' requests/limits "
    "so the new pods fit in what is left; restarting pods does not help",
    "webhook": "Fix the pod template so the admission webhook admits it, or fix the webhook",
    "pod_security": "Make the pod template satisfy the namespace's Pod Security level "
    "(securityContext: runAsNonRoot, no privilege escalation, dropped capabilities)",
    "service_account": "Create the ServiceAccount the pod template names, or fix the name",
    "other": "Fix what the controller's FailedCreate message names",
}


_SCHEDULE_FIX = {
    "insufficient": "Lower the pod's requests or add a node with enough allocatable capacity",
    "node_selector": "Fix the pod's nodeSelector/affinity, or label the node(s) it should run "
    "on; no node carries the labels it asks for",
    "pod_anti_affinity": "Relax the pod anti-affinity (preferredDuringScheduling, or fewer "
    "replicas than topology domains), or add nodes in another topology domain",
    "pod_affinity": "Fix the pod affinity's selector, or run the pods it must be next to",
    "topology_spread": "Relax the topology spread constraint (maxSkew, whenUnsatisfiable: "
    "ScheduleAnyway) or add nodes in the missing domains",
    "volume_node_affinity": "Schedule the pod in the zone of its volume (or move the volume); "
    "its PersistentVolume's node affinity excludes the free nodes",
    "cordoned": "Uncordon the nodes (kubectl uncordon) once their maintenance is done, or add "
    "schedulable capacity",
    "ports": "Drop the hostPort or run fewer replicas than nodes",
    "too_many_pods": "Add nodes or raise the nodes' max pods",
    "volume_limit": "Add nodes or attach fewer volumes per node",
}


def _probe_fix(f: dict[str, Any]) -> str:
    quote = str(f.get("quote", ""))
    m = re.search(r"statuscode: (\d{3})", quote)
    if m and m.group(1).startswith("4"):
        return (
            f"Point the probe at a path the container serves: it answers HTTP {m.group(1)} "
            "(a wrong path or port, not a timing problem)"
        )
    if "connection refused" in quote:
        return (
            "Check the probe's port against the port the container listens on; if it only "
            "listens after start-up, add a startupProbe"
        )
    return (
        "Make the probe match the start-up time (initialDelaySeconds, timeoutSeconds, "
        "or a startupProbe), or speed up the endpoint"
    )


def fmt(
    template: str,
    f: dict[str, Any],
    workload: str | None,
    owner_kind: str | None = None,
    changed: str | None = None,
) -> str | None:
    """The template filled from the finding, or ``None`` when a slot it needs has no value
    from the evidence (such a template is not offered)."""
    extra = f.get("extra", {})
    kind = {"ReplicaSet": "deployment", None: "pod"}.get(owner_kind, str(owner_kind).lower())
    rollback = (
        f"; or roll back {kind}/{workload} (the newest revision changed: {changed})"
        if changed and kind == "deployment"
        else ""
    )
    if kind in ("job", "cronjob"):
        rerun = f"re-run the job (kubectl create job --from=cronjob/... or re-apply {workload})"
        after = f", then re-run the job ({kind} {workload})"
    else:
        rerun = f"restart the pods (kubectl rollout restart {kind}/{workload or f['pod']})"
        after = (
            f"; the newest revision changed {changed}: rolling back {kind}/{workload} is an option"
            if changed and kind == "deployment"
            else ""
        )
    obj_kind = str(extra.get("kind") or "ConfigMap")
    values = {
        "pod": f["pod"],
        "container": f.get("container") or "",
        "workload": workload or f["pod"],
        "limit": extra.get("memory_limit") or "the current limit",
        "image": extra.get("image", ""),
        "variable": extra.get("variable", ""),
        "host": extra.get("host", ""),
        "binary": extra.get("binary", ""),
        "suggestion_text": f" (did you mean {extra['suggestion']!r}?)"
        if extra.get("suggestion")
        else "",
        "owner_kind_lower": kind,
        "rollback": rollback,
        "rerun": rerun,
        "after": after,
        "probe_fix": _probe_fix(f),
        "pull_fix": "Give the pod an imagePullSecret that can read "
        f"{str(extra.get('image', '')).split('/')[0]} (or fix the one it has): the registry "
        "refused the credentials"
        if re.search(
            r"(?i)unauthorized|authentication required|access denied|denied:|403", f.get("text", "")
        )
        else f"Push {extra.get('image', '')} or point the {kind} at an existing tag",
        "schedule_fix": _SCHEDULE_FIX.get(str(extra.get("clause")), _SCHEDULE_FIX["insufficient"]),
        "create_fix": _CREATE_FIX.get(str(extra.get("why")), _CREATE_FIX["other"]),
        "kind_lower": str(extra.get("kind") or "").lower(),
        "object_kind": obj_kind,
        "object_kind_lower": obj_kind.lower(),
        "object": extra.get("object"),
        "key_text": f" with key {extra['key']}" if extra.get("key") else "",
        "claim": extra.get("claim", ""),
        "taint_key": extra.get("key", ""),
        "resource": extra.get("resource", "the resource"),
        "node": extra.get("node", ""),
        "service": extra.get("service", ""),
        "selector": extra.get("selector", ""),
        "deadline": extra.get("deadline"),
        "job": extra.get("job", ""),
        "hpa": extra.get("hpa", ""),
        "max": extra.get("max"),
        "vocab_remedy": extra.get("remedy"),
        "probe_hint": "the probe failures and restarts follow from it, so do not tune the probe"
        if extra.get("symptom_probe")
        else "retries and timeouts in the client only hide it",
    }
    needed = [n for n in slots(template) if n not in _DECORATION]
    if any(values.get(n) in (None, "", "?") for n in needed):
        return None
    return template.format(**values)


_DECORATION = frozenset(
    {"suggestion_text", "rollback", "rerun", "after", "key_text", "probe_hint", "limit"}
)
"""Slots that add to a sentence that stands without them (may be empty)."""
