"""Cloud flavours (node names, labels, providerIDs, kubelet versions, registries) and
runtime log styles (noise lines, error lines and stack traces, in plain, JSON or logfmt)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

from bench.sre_gen_lib._cluster import DAY, Cluster, Obj
from bench.sre_gen_lib._model import Flavour, LogFormat, Runtime


@dataclass(frozen=True, kw_only=True, slots=True)
class Nodes:
    """The nodes a cluster got: the schedulable workers and, where the cloud shows one,
    the control-plane node (tainted ``node-role.kubernetes.io/control-plane``)."""

    workers: tuple[str, ...]
    tainted: str | None
    """A node workloads may not land on: the control plane (kind) or a system pool."""
    taint: str
    """That node's taint as the scheduler prints it: ``{key: value}``."""


def _node(k: Cluster, name: str, *, labels: dict[str, str], provider: str, kubelet: str,
          runtime: str, taints: list[Obj] | None = None, cpu: int = 4, mem_gi: int = 16) -> None:  # fmt: skip
    ip = f"10.{k.rng.randint(0, 30)}.{k.rng.randint(0, 255)}.{k.rng.randint(2, 250)}"
    spec: Obj = {"providerID": provider, "podCIDR": f"10.{k.rng.randint(64, 127)}.{len(k.nodes)}.0/24"}
    if taints:
        spec["taints"] = taints
    hb = k.ago(k.rng.randint(5, 40))
    k.nodes.append({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": k.uid(), "creationTimestamp": k.ago(40 * DAY),
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64", "beta.kubernetes.io/arch": "amd64",
                                "node.kubernetes.io/instance-type": labels.pop("_type", "standard"),
                                **labels}},
        "spec": spec,
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "capacity": {"cpu": str(cpu), "memory": f"{mem_gi * 1024 * 1024}Ki", "pods": "110",
                         "ephemeral-storage": "101430960Ki"},
            "allocatable": {"cpu": f"{cpu * 1000 - 140}m", "memory": f"{mem_gi * 1024 * 1024 - 1_800_000}Ki",
                            "pods": "110", "ephemeral-storage": "93478772582"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available", "lastHeartbeatTime": hb, "lastTransitionTime": k.ago(40 * DAY)},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                 "message": "kubelet has no disk pressure", "lastHeartbeatTime": hb, "lastTransitionTime": k.ago(40 * DAY)},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                 "message": "kubelet has sufficient PID available", "lastHeartbeatTime": hb, "lastTransitionTime": k.ago(40 * DAY)},
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status", "lastHeartbeatTime": hb, "lastTransitionTime": k.ago(40 * DAY)},
            ],
            "nodeInfo": {"kubeletVersion": kubelet, "kubeProxyVersion": kubelet, "containerRuntimeVersion": runtime,
                         "operatingSystem": "linux", "architecture": "amd64", "osImage": "Container-Optimized OS"},
        },
    })  # fmt: skip


_CP_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


def build_nodes(k: Cluster, flavour: Flavour, workers: int = 2) -> Nodes:
    """The cluster's nodes in the flavour's naming, plus one node workloads cannot use."""
    r = k.rng
    names: list[str] = []
    if flavour is Flavour.GKE:
        cluster, pool = r.choice(["prod", "prod-eu", "shop"]), r.choice(["default-pool", "pool-1"])
        zone = r.choice(["us-central1-a", "europe-west1-b"])
        project = f"acme-{r.choice(['prod', 'platform'])}-{r.randint(100, 999)}"
        group = k.suffix(8).replace("z", "a")
        for i in range(workers + 1):
            system = i == workers
            p = "system-pool" if system else pool
            name = f"gke-{cluster}-{p}-{group}-{k.suffix(4)}"
            _node(k, name, labels={"cloud.google.com/gke-nodepool": p, "topology.kubernetes.io/zone": zone,
                                   "_type": "e2-standard-4"},
                  provider=f"gce://{project}/{zone}/{name}", kubelet="v1.30.5-gke.1014001",
                  runtime="containerd://1.7.22",
                  taints=[{"key": "components.gke.io/gke-managed-components", "value": "true",
                           "effect": "NoSchedule"}] if system else None)  # fmt: skip
            names.append(name)
        return Nodes(workers=tuple(names[:-1]), tainted=names[-1],
                     taint="{components.gke.io/gke-managed-components: true}")
    if flavour is Flavour.EKS:
        region = r.choice(["eu-west-1", "us-east-2"])
        for i in range(workers + 1):
            system = i == workers
            name = f"ip-10-0-{r.randint(0, 255)}-{r.randint(2, 250)}.{region}.compute.internal"
            _node(k, name, labels={"eks.amazonaws.com/nodegroup": "system" if system else "apps",
                                   "topology.kubernetes.io/zone": f"{region}{'abc'[i % 3]}",
                                   "_type": "m6i.xlarge"},
                  provider=f"aws:///{region}{'abc'[i % 3]}/i-0{r.getrandbits(64):016x}",
                  kubelet="v1.30.4-eks-a737599", runtime="containerd://1.7.22",
                  taints=[{"key": "CriticalAddonsOnly", "value": "true", "effect": "NoSchedule"}]
                  if system else None)  # fmt: skip
            names.append(name)
        return Nodes(workers=tuple(names[:-1]), tainted=names[-1], taint="{CriticalAddonsOnly: true}")
    if flavour is Flavour.AKS:
        rg = f"MC_rg-{r.choice(['prod', 'shop'])}_aks-{r.choice(['prod', 'main'])}_westeurope"
        n = r.randint(10_000_000, 99_999_999)
        for i in range(workers + 1):
            system = i == workers
            pool = "system" if system else "nodepool1"
            name = f"aks-{pool}-{n}-vmss{i:06d}"
            _node(k, name, labels={"kubernetes.azure.com/agentpool": pool, "agentpool": pool,
                                   "kubernetes.azure.com/mode": "system" if system else "user",
                                   "topology.kubernetes.io/zone": "westeurope-1", "_type": "Standard_D4s_v5"},
                  provider=f"azure:///subscriptions/{k.uid()}/resourceGroups/{rg}/providers/"
                           f"Microsoft.Compute/virtualMachineScaleSets/aks-{pool}-{n}-vmss/virtualMachines/{i}",
                  kubelet="v1.30.3", runtime="containerd://1.7.20-1",
                  taints=[{"key": "CriticalAddonsOnly", "value": "true", "effect": "NoSchedule"}]
                  if system else None)  # fmt: skip
            names.append(name)
        return Nodes(workers=tuple(names[:-1]), tainted=names[-1], taint="{CriticalAddonsOnly: true}")
    cluster = r.choice(["kind", "dev", "ci"])
    _node(k, f"{cluster}-control-plane", labels={"node-role.kubernetes.io/control-plane": ""},
          provider=f"kind://docker/{cluster}/{cluster}-control-plane", kubelet="v1.31.0",
          runtime="containerd://1.7.18", taints=[_CP_TAINT])  # fmt: skip
    for i in range(workers):
        name = f"{cluster}-worker{i + 1 if i else ''}"
        _node(k, name, labels={}, provider=f"kind://docker/{cluster}/{name}", kubelet="v1.31.0",
              runtime="containerd://1.7.18")  # fmt: skip
        names.append(name)
    return Nodes(workers=tuple(names), tainted=f"{cluster}-control-plane",
                 taint="{node-role.kubernetes.io/control-plane: }")


def image(k: Cluster, flavour: Flavour, app: str) -> str:
    """An image reference in the flavour's registry."""
    tag = f"{k.rng.randint(1, 4)}.{k.rng.randint(0, 30)}.{k.rng.randint(0, 9)}"
    if flavour is Flavour.GKE:
        return f"us-docker.pkg.dev/acme-prod/apps/{app}:{tag}"
    if flavour is Flavour.EKS:
        return f"{k.rng.randint(10**11, 10**12 - 1)}.dkr.ecr.eu-west-1.amazonaws.com/{app}:{tag}"
    if flavour is Flavour.AKS:
        return f"acmeprod.azurecr.io/shop/{app}:{tag}"
    return f"ghcr.io/acme/{app}:{tag}"


# -- log styles ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class LogStyle:
    """How a workload writes its log."""

    runtime: Runtime
    fmt: LogFormat

    def line(self, k: Cluster, ago: float, level: str, msg: str, **fields: object) -> str:
        when = k.now - timedelta(seconds=ago)
        t = when.strftime("%Y-%m-%dT%H:%M:%S") + f".{when.microsecond // 1000:03d}Z"
        if self.fmt is LogFormat.JSON:
            return json.dumps({"ts": t, "level": level.lower(), "msg": msg, **fields})
        if self.fmt is LogFormat.LOGFMT:
            extra = " ".join(f"{key}={_lf(v)}" for key, v in fields.items())
            return f"time={t} level={level.lower()} msg={_lf(msg)}" + (f" {extra}" if extra else "")
        extra = " ".join(f"{key}={v}" for key, v in fields.items())
        return f"{t} {level.upper():<5} {msg}" + (f" {extra}" if extra else "")

    def noise(self, k: Cluster, n: int, *, start: float, span: float) -> list[str]:
        """``n`` ordinary lines between ``start`` and ``start - span`` seconds ago."""
        paths = ["/api/v1/orders", "/api/v1/items", "/metrics", "/healthz", "/api/v1/cart", "/readyz"]
        out = []
        for i in range(n):
            ago = start - span * i / max(n, 1)
            roll = k.rng.random()
            if roll < 0.08:
                out.append(self.line(k, ago, "DEBUG", "cache refreshed", entries=k.rng.randint(10, 900)))
            elif roll < 0.12:
                out.append(self.line(k, ago, "INFO", "gc pause", pause_ms=round(k.rng.random() * 4, 2)))
            else:
                out.append(self.line(k, ago, "INFO", "request completed", method="GET",
                                     path=k.rng.choice(paths), status=200,
                                     duration_ms=k.rng.randint(2, 90)))  # fmt: skip
        return out


def _lf(v: object) -> str:
    s = str(v)
    return json.dumps(s) if (" " in s or '"' in s or "=" in s) else s


@dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """A failure as each runtime reports it: ``{runtime: (exception class, message)}``."""

    forms: dict[Runtime, tuple[str, str]]


def crash_lines(style: LogStyle, k: Cluster, ago: float, failure: Failure) -> list[str]:
    """The last lines a process writes when ``failure`` kills it, in its runtime's shape
    (a Python traceback, a Go panic, a Java chain with ``Caused by``, a Node throw, a .NET
    unhandled exception, a Rust panic); in JSON and logfmt the trace rides in a field."""
    rt = style.runtime
    cls, msg = failure.forms[rt]
    if rt is Runtime.PYTHON:
        trace = ["Traceback (most recent call last):",
                 '  File "/app/main.py", line 88, in <module>', "    asyncio.run(main())",
                 '  File "/app/service/startup.py", line 41, in connect',
                 "    self.pool = await create_pool(self.settings.dsn)", f"{cls}: {msg}"]  # fmt: skip
    elif rt is Runtime.GO:
        trace = [f"panic: {cls}: {msg}", "", "goroutine 1 [running]:", "main.mustConnect(...)",
                 "\t/src/cmd/server/main.go:57 +0x1d4", "main.main()",
                 "\t/src/cmd/server/main.go:31 +0x8c"]  # fmt: skip
    elif rt is Runtime.JAVA:
        trace = ['Exception in thread "main" java.lang.IllegalStateException: Failed to start application',
                 "\tat com.acme.Application.main(Application.java:24)",
                 f"Caused by: {cls}: {msg}",
                 "\tat com.acme.infra.Client.connect(Client.java:118)",
                 "\t... 12 more"]  # fmt: skip
    elif rt is Runtime.NODE:
        trace = ["node:internal/process/promises:391", "    triggerUncaughtException(err, true /* fromPromise */);",
                 "    ^", "", f"{cls}: {msg}",
                 "    at async Pool.connect (/app/node_modules/pg-pool/index.js:45:11)",
                 "    at async main (/app/dist/server.js:22:5)", "", "Node.js v20.17.0"]  # fmt: skip
    elif rt is Runtime.DOTNET:
        trace = [f"Unhandled exception. {cls}: {msg}",
                 "   at Acme.Api.Startup.ConnectAsync() in /src/Api/Startup.cs:line 51",
                 "   at Acme.Api.Program.Main(String[] args) in /src/Api/Program.cs:line 12",
                 "   at Acme.Api.Program.<Main>(String[] args)"]  # fmt: skip
    else:
        trace = ["thread 'main' panicked at src/main.rs:64:10:",
                 f"called `Result::unwrap()` on an `Err` value: {cls}({msg!r})",
                 "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"]  # fmt: skip
    if style.fmt is LogFormat.PLAIN:
        return [style.line(k, ago, "ERROR", f"fatal: {msg}"), *trace]
    return [style.line(k, ago, "ERROR", "fatal error, exiting", error=f"{cls}: {msg}",
                       stack="\n".join(trace))]  # fmt: skip
