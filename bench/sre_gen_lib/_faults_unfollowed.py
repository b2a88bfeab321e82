"""Fault classes whose cause is on an object no detector follows (issue 28): the evidence
is in the dump, but on a kind the rules do not read as a cause, so the rules miss the
decisive object and only an investigator that reads it can name it. Kept out of the
default rotation (``FAULTS``) so the incidents of a seed stay as they were; ``generate``
takes them by name (``UNFOLLOWED``).

``lb_sync_failed``: a LoadBalancer Service the cloud controller cannot provision; its
pods are fine, and the only evidence is the Service's own events (the message each cloud
controller writes when ``EnsureLoadBalancer`` fails)."""

from __future__ import annotations

from bench.sre_gen_lib._cluster import MINUTE
from bench.sre_gen_lib._kit import Ctx, Fault, FaultFn, Symptom, ent, healthy_deployment, root
from bench.sre_gen_lib._model import Flavour

_LB_FAILURES = {
    Flavour.GKE: "failed to ensure load balancer: googleapi: Error 403: QUOTA_EXCEEDED - "
    "Quota 'FORWARDING_RULES' exceeded. Limit: 15.0 globally.",
    Flavour.EKS: "failed to ensure load balancer: could not find any suitable subnets for "
    "creating the ELB",
    Flavour.AKS: "failed to ensure load balancer: ensure(service): lb(kubernetes) - "
    "PublicIPCountLimitReached: Cannot create more than 10 public IP addresses for this "
    "subscription in this region.",
    Flavour.KIND: 'failed to ensure load balancer: no available IPs in pool "default"',
}


def lb_sync_failed(ctx: Ctx) -> Fault:
    k = ctx.k
    w, pods = healthy_deployment(ctx, replicas=k.rng.randint(1, 3), age=k.rng.randint(2, 9) * 86400)
    svc = k.items("services")[-1]
    svc["spec"]["type"] = "LoadBalancer"
    svc["spec"]["ports"][0]["nodePort"] = k.rng.randint(30000, 32767)
    since = k.rng.randint(10, 80) * MINUTE
    svc["metadata"]["creationTimestamp"] = k.ago(since)
    name = svc["metadata"]["name"]
    source = (
        ("metallb-controller", "") if ctx.flavour is Flavour.KIND else ("service-controller", "")
    )
    k.event(svc, "EnsuringLoadBalancer", "Ensuring load balancer", type_="Normal",
            count=k.rng.randint(4, 12), seen=(since, k.rng.randint(30, 300)), source=source)  # fmt: skip
    k.event(svc, "SyncLoadBalancerFailed",
            f"Error syncing load balancer: {_LB_FAILURES[ctx.flavour]}",
            count=k.rng.randint(4, 12), seen=(since, k.rng.randint(30, 300)), source=source)  # fmt: skip
    return Fault(roots=(root(ctx, "Service", name),),
                 reasons=("SyncLoadBalancerFailed", "load balancer"),
                 symptoms=(ent(ctx, "Deployment", w.name),
                           *(ent(ctx, "Pod", p["metadata"]["name"]) for p in pods)),
                 subject=name, symptom=Symptom.DOWN, subject_kind="service")  # fmt: skip


UNFOLLOWED: dict[str, FaultFn] = {"lb_sync_failed": lb_sync_failed}
