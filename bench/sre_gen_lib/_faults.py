"""Fault classes of a container: crash loops (an app error in each runtime's shape, exit 0
``Completed``, ``exec format error``, OOMKilled, a dependency error), image pulls, config
errors and volumes. Message shapes follow the kubelet's and the controllers' sources."""

from __future__ import annotations

from typing import Any

from bench.sre_gen_lib._cluster import MINUTE, Obj, Ref, Workload
from bench.sre_gen_lib._flavour import Failure, crash_lines
from bench.sre_gen_lib._kit import (
    Ctx,
    Fault,
    FaultFn,
    Symptom,
    container,
    ent,
    pod_ref,
    root,
    running,
    scheduled_event,
    started_events,
    terminated,
    waiting,
)
from bench.sre_gen_lib._model import Entity, Runtime

R = Runtime


def _symptoms(ctx: Ctx, w: Workload, pods: list[Obj]) -> tuple[Entity, ...]:
    return (ent(ctx, "ReplicaSet", w.owner.name), ent(ctx, "Service", w.name),
            *(ent(ctx, "Pod", p["metadata"]["name"]) for p in pods))  # fmt: skip


def crashloop(ctx: Ctx, *, reason: str, code: int, previous: list[str], message: str | None = None,
              **cargs: Any) -> tuple[Workload, list[Obj]]:  # fmt: skip
    """A Deployment whose every pod is in CrashLoopBackOff, the last instance terminated
    with ``reason``/``code`` and ``previous`` as its log; a Service in front of it."""
    k = ctx.k
    app = ctx.name()
    c = container(ctx, app, **cargs)
    n = k.rng.randint(1, 3)
    rollout = k.rng.randint(25, 90) * MINUTE
    w = k.deployment(app, [c], replicas=n, ready=0, rollout=rollout)
    pods = []
    for _ in range(n):
        restarts = k.rng.randint(5, 14)
        finished = k.rng.randint(92, 99)  # the previous log ends 100 s ago
        last = terminated(ctx, reason, code, finished=finished, ran=k.rng.randint(1, 40), message=message)
        node = ctx.node()
        pod = k.pod(w, [], node=node, age=rollout - 5)
        st = waiting(ctx, c, "CrashLoopBackOff",
                     f"back-off 5m0s restarting failed container={app} pod={pod_ref(pod, ctx.ns)}",
                     restarts=restarts, last=last)  # fmt: skip
        pod["status"]["containerStatuses"] = [st]
        for cond in pod["status"]["conditions"]:
            if cond["type"] in ("Ready", "ContainersReady"):
                cond.update(status="False", reason="ContainersNotReady",
                            message=f"containers with unready status: [{app}]")  # fmt: skip
        scheduled_event(ctx, pod, node, ago=rollout - 5)
        started_events(ctx, pod, c, count=restarts + 1, seen=(rollout - 8, finished + 20))
        k.event(pod, "BackOff", f"Back-off restarting failed container {app} in pod {pod_ref(pod, ctx.ns)}",
                count=restarts * 5, seen=(rollout - 60, k.rng.randint(2, 40)),
                field_path=f"spec.containers{{{app}}}")  # fmt: skip
        k.log(pod, app, previous, previous=True)
        k.log(pod, app, previous[: max(1, len(previous) // 3)])
        pods.append(pod)
    k.service(app, {"app": app})
    return w, pods


def _boot(ctx: Ctx, n: int = 6) -> list[str]:
    s = ctx.style
    return [s.line(ctx.k, 120, "INFO", "starting service", version=f"1.{ctx.k.rng.randint(2, 40)}.0"),
            s.line(ctx.k, 119, "INFO", "loaded configuration", source="env"),
            *s.noise(ctx.k, n, start=118, span=3)]  # fmt: skip


def _dependency(ctx: Ctx, failure: Failure, reasons: tuple[str, ...]) -> Fault:
    lines = [*_boot(ctx), *crash_lines(ctx.style, ctx.k, 100, failure)]
    w, pods = crashloop(ctx, reason="Error", code=1, previous=lines)
    return Fault(roots=(root(ctx, "Deployment", w.name),), reasons=reasons,
                 symptoms=_symptoms(ctx, w, pods), subject=w.name, symptom=Symptom.RESTARTING)  # fmt: skip


_APP_ERRORS: dict[Runtime, tuple[str, str, tuple[str, ...]]] = {
    # (exception class, message, accepted reasons: the class or the message's own words)
    R.PYTHON: ("KeyError", "'PAYMENT_PROVIDER_URL'", ("KeyError", "PAYMENT_PROVIDER_URL")),
    R.GO: ("runtime error", "invalid memory address or nil pointer dereference", ("nil pointer", "panic", "invalid memory address")),
    R.JAVA: ("java.lang.NullPointerException", 'Cannot invoke "String.length()" because "value" is null',
             ("NullPointerException", '"value" is null')),
    R.NODE: ("TypeError", "Cannot read properties of undefined (reading 'split')",
             ("TypeError", "Cannot read properties of undefined")),
    R.DOTNET: ("System.NullReferenceException", "Object reference not set to an instance of an object.",
               ("NullReferenceException", "Object reference not set")),
    R.RUST: ("ParseIntError", "invalid digit found in string", ("panicked", "ParseIntError", "panic", "invalid digit")),
}  # fmt: skip


def app_error(ctx: Ctx) -> Fault:
    cls, msg, reasons = _APP_ERRORS[ctx.style.runtime]
    failure = Failure(forms={rt: (cls, msg) for rt in Runtime})
    lines = [*_boot(ctx), *crash_lines(ctx.style, ctx.k, 100, failure)]
    code = 2 if ctx.style.runtime is R.GO else 101 if ctx.style.runtime is R.RUST else 1
    code = 134 if ctx.style.runtime is R.DOTNET else code
    w, pods = crashloop(ctx, reason="Error", code=code, previous=lines)
    return Fault(roots=(root(ctx, "Deployment", w.name),), reasons=reasons,
                 symptoms=_symptoms(ctx, w, pods), subject=w.name, symptom=Symptom.RESTARTING)  # fmt: skip


def completed_loop(ctx: Ctx) -> Fault:
    """A one-shot command in a Deployment: it exits 0 and the kubelet restarts it."""
    s = ctx.style
    lines = [s.line(ctx.k, 60, "INFO", "running database migrations"),
             s.line(ctx.k, 58, "INFO", "applied 0 migrations, schema up to date"),
             s.line(ctx.k, 57, "INFO", "done")]  # fmt: skip
    w, pods = crashloop(ctx, reason="Completed", code=0, previous=lines,
                        command=["/app/migrate", "--up"])  # fmt: skip
    return Fault(roots=(root(ctx, "Deployment", w.name),),
                 reasons=("Completed", "exit code 0", "exited 0", "exit 0", "exits 0"),
                 symptoms=_symptoms(ctx, w, pods), subject=w.name, symptom=Symptom.RESTARTING)  # fmt: skip


def exec_format(ctx: Ctx) -> Fault:
    """An image built for another CPU (arm64 on amd64 nodes)."""
    lines = ["exec /usr/local/bin/server: exec format error"]
    w, pods = crashloop(ctx, reason="Error", code=255, previous=lines)
    return Fault(roots=(root(ctx, "Deployment", w.name),),
                 reasons=("exec format error", "architecture", "arm64"),
                 symptoms=_symptoms(ctx, w, pods), subject=w.name, symptom=Symptom.RESTARTING)  # fmt: skip


def oomkilled(ctx: Ctx) -> Fault:
    s = ctx.style
    lines = [*_boot(ctx), *s.noise(ctx.k, 25, start=90, span=60),
             s.line(ctx.k, 31, "INFO", "loading batch", rows=ctx.k.rng.randint(200_000, 900_000))]  # fmt: skip
    mem = ctx.k.rng.choice(["256Mi", "384Mi", "512Mi", "1Gi"])
    w, pods = crashloop(ctx, reason="OOMKilled", code=137, previous=lines, mem=mem)
    return Fault(roots=(root(ctx, "Deployment", w.name),), reasons=("OOMKilled",),
                 symptoms=_symptoms(ctx, w, pods), subject=w.name, symptom=Symptom.RESTARTING)  # fmt: skip


def db_auth(ctx: Ctx) -> Fault:
    user = ctx.k.rng.choice(["orders", "app", "svc_payments", "ledger_rw"])
    core = f'password authentication failed for user "{user}"'
    failure = Failure(forms={
        R.PYTHON: ("psycopg.OperationalError", f'connection failed: connection to server at "10.20.0.15", port 5432 failed: FATAL:  {core}'),
        R.GO: ("failed to connect", f"`host=10.20.0.15 user={user} database=app`: failed SASL auth (FATAL: {core} (SQLSTATE 28P01))"),
        R.JAVA: ("org.postgresql.util.PSQLException", f"FATAL: {core}"),
        R.NODE: ("error", core),
        R.DOTNET: ("Npgsql.PostgresException (0x80004005)", f"28P01: {core}"),
        R.RUST: ("Database", f"error returned from database: {core}"),
    })  # fmt: skip
    return _dependency(ctx, failure, ("authentication", "password authentication failed", "28P01"))


def dns_failure(ctx: Ctx) -> Fault:
    host = f"{ctx.k.rng.choice(['orders-db', 'redis-master', 'kafka-0', 'catalog-pg'])}.{ctx.ns}.svc.cluster.local"
    failure = Failure(forms={
        R.PYTHON: ("socket.gaierror", "[Errno -2] Name or service not known"),
        R.GO: ("dial tcp", f"lookup {host} on 10.96.0.10:53: no such host"),
        R.JAVA: ("java.net.UnknownHostException", host),
        R.NODE: ("Error", f"getaddrinfo ENOTFOUND {host}"),
        R.DOTNET: ("System.Net.Sockets.SocketException (00000001, 11)", f"Name or service not known ({host}:5432)"),
        R.RUST: ("Io", f"failed to lookup address information: Name or service not known ({host})"),
    })  # fmt: skip
    return _dependency(ctx, failure, ("dns", "no such host", "ENOTFOUND", "Name or service not known",
                                      "UnknownHost", "lookup", "resolve"))  # fmt: skip


def conn_refused(ctx: Ctx) -> Fault:
    addr = f"10.{ctx.k.rng.randint(20, 40)}.{ctx.k.rng.randint(0, 255)}.{ctx.k.rng.randint(2, 250)}:{ctx.k.rng.choice([5432, 6379, 9092, 3306])}"
    host, port = addr.split(":")
    failure = Failure(forms={
        R.PYTHON: ("ConnectionRefusedError", f"[Errno 111] Connect call failed ('{host}', {port})"),
        R.GO: ("dial tcp", f"{addr}: connect: connection refused"),
        R.JAVA: ("java.net.ConnectException", f"Connection refused: /{addr}"),
        R.NODE: ("Error", f"connect ECONNREFUSED {addr}"),
        R.DOTNET: ("System.Net.Sockets.SocketException (111)", f"Connection refused ({addr})"),
        R.RUST: ("Io", f"Connection refused (os error 111) connecting to {addr}"),
    })  # fmt: skip
    return _dependency(ctx, failure, ("connection refused", "ECONNREFUSED", "refused", "ConnectionRefusedError",
                                      "Errno 111", "error 111", "(111)"))  # fmt: skip


def tls_expired(ctx: Ctx) -> Fault:
    host = ctx.k.rng.choice(["api.partner-bank.com", "vault.internal.acme.io", "auth.acme.io"])
    now = ctx.k.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    expired = ctx.k.ago(ctx.k.rng.randint(2, 9) * 86400)
    failure = Failure(forms={
        R.PYTHON: ("ssl.SSLCertVerificationError", "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate has expired (_ssl.c:1006)"),
        R.GO: ("Get", f'"https://{host}/v1/token": tls: failed to verify certificate: x509: certificate has expired or is not yet valid: current time {now} is after {expired}'),
        R.JAVA: ("javax.net.ssl.SSLHandshakeException", f"PKIX path validation failed: java.security.cert.CertPathValidatorException: validity check failed; NotAfter: {expired}"),
        R.NODE: ("Error", "certificate has expired"),
        R.DOTNET: ("System.Security.Authentication.AuthenticationException", "The remote certificate is invalid because of errors in the certificate chain: NotTimeValid"),
        R.RUST: ("Tls", "invalid peer certificate: Expired"),
    })  # fmt: skip
    return _dependency(ctx, failure, ("certificate", "x509", "expired", "NotTimeValid", "CERTIFICATE_VERIFY_FAILED"))


def start_error(ctx: Ctx) -> Fault:
    """The command is not in the image: the runtime cannot start the process (exit 128)."""
    binary = ctx.k.rng.choice(["gunicron", "/app/bin/serve", "node_modules/.bin/next"])
    msg = ("failed to create containerd task: failed to create shim task: OCI runtime create failed: "
           "runc create failed: unable to start container process: exec: \"" + binary + "\": "
           "executable file not found in $PATH: unknown")  # fmt: skip
    w, pods = crashloop(ctx, reason="StartError", code=128, previous=[], message=msg, command=[binary])
    for pod in pods:
        ctx.k.event(pod, "Failed", f"Error: {msg}", count=ctx.k.rng.randint(5, 14), seen=(40 * MINUTE, ctx.k.rng.randint(20, 90)), field_path=f"spec.containers{{{w.name}}}")  # fmt: skip
    return Fault(roots=(root(ctx, "Deployment", w.name),),
                 reasons=("executable file not found", "StartError", "not found in $PATH"),
                 symptoms=_symptoms(ctx, w, pods), subject=w.name, symptom=Symptom.RESTARTING)  # fmt: skip


def init_crash(ctx: Ctx) -> Fault:
    """An init container (the schema migration) fails on every start: Init:CrashLoopBackOff."""
    k = ctx.k
    app = ctx.name()
    c = container(ctx, app)
    init = {"name": "migrate", "image": c["image"], "command": ["/app/migrate", "up"],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}  # fmt: skip
    rollout = k.rng.randint(20, 80) * MINUTE
    w = k.deployment(app, [c], replicas=1, ready=0, rollout=rollout, initContainers=[init])
    node = ctx.node()
    pod = k.pod(w, [waiting(ctx, c, "PodInitializing")], phase="Pending", node=node,
                age=rollout - 3, initContainers=[init])  # fmt: skip
    restarts = k.rng.randint(4, 12)
    last = terminated(ctx, "Error", 1, finished=95, ran=4)
    pod["status"]["initContainerStatuses"] = [waiting(
        ctx, init, "CrashLoopBackOff",
        f"back-off 5m0s restarting failed container=migrate pod={pod_ref(pod, ctx.ns)}", restarts=restarts, last=last)]  # fmt: skip
    for cond in pod["status"]["conditions"]:
        if cond["type"] == "Initialized":
            cond.update(status="False", reason="ContainersNotInitialized",
                        message="containers with incomplete status: [migrate]")  # fmt: skip
    scheduled_event(ctx, pod, node, ago=rollout - 3)
    started_events(ctx, pod, init, count=restarts + 1, seen=(rollout - 5, 110))
    k.event(pod, "BackOff", f"Back-off restarting failed container migrate in pod {pod_ref(pod, ctx.ns)}",
            count=restarts * 4, seen=(rollout - 60, k.rng.randint(5, 40)), field_path="spec.initContainers{migrate}")  # fmt: skip
    table = k.rng.choice(["orders", "users", "invoices"])
    cls, msg = "psycopg2.errors.DuplicateTable", f'relation "{table}" already exists'
    k.log(pod, "migrate", [ctx.style.line(k, 100, "INFO", "running migrations", target="head"),
                           ctx.style.line(k, 99, "INFO", "applying 0042_add_orders_index"),
                           *crash_lines(ctx.style, k, 98, Failure(forms={rt: (cls, msg) for rt in Runtime}))],
          previous=True)  # fmt: skip
    k.service(app, {"app": app})
    return Fault(roots=(root(ctx, "Deployment", app),), reasons=("DuplicateTable", "already exists"),
                 symptoms=_symptoms(ctx, w, [pod]), subject=app, symptom=Symptom.STUCK)  # fmt: skip


# -- image pulls ---------------------------------------------------------------------------


def _pull(ctx: Ctx, detail: str, reasons: tuple[str, ...]) -> Fault:
    k = ctx.k
    app = ctx.name()
    img = ctx.image(app)
    c = container(ctx, app, img=img)
    rollout = k.rng.randint(15, 60) * MINUTE
    n = k.rng.randint(1, 3)
    w = k.deployment(app, [c], replicas=n, ready=0, rollout=rollout)
    pods = []
    for _ in range(n):
        node = ctx.node()
        pod = k.pod(w, [waiting(ctx, c, "ImagePullBackOff", f'Back-off pulling image "{img}"')],
                    phase="Pending", node=node, age=rollout - 3)  # fmt: skip
        fp = f"spec.containers{{{app}}}"
        scheduled_event(ctx, pod, node, ago=rollout - 3)
        tries = k.rng.randint(4, 9)
        k.event(pod, "Pulling", f'Pulling image "{img}"', type_="Normal", count=tries,
                seen=(rollout - 4, k.rng.randint(30, 200)), field_path=fp)  # fmt: skip
        k.event(pod, "Failed", f'Failed to pull image "{img}": {detail.format(img=img)}', count=tries,
                seen=(rollout - 5, k.rng.randint(30, 200)), field_path=fp)  # fmt: skip
        k.event(pod, "Failed", "Error: ErrImagePull", count=tries, seen=(rollout - 5, 60), field_path=fp)
        k.event(pod, "BackOff", f'Back-off pulling image "{img}"', type_="Normal", count=tries * 6,
                seen=(rollout - 6, k.rng.randint(3, 30)), field_path=fp)  # fmt: skip
        k.event(pod, "Failed", "Error: ImagePullBackOff", count=tries * 6, seen=(rollout - 6, 20),
                field_path=fp)  # fmt: skip
        pods.append(pod)
    k.service(app, {"app": app})
    return Fault(roots=(root(ctx, "Deployment", app),), reasons=reasons,
                 symptoms=_symptoms(ctx, w, pods), subject=app, symptom=Symptom.PENDING)  # fmt: skip


def image_not_found(ctx: Ctx) -> Fault:
    detail = ("rpc error: code = NotFound desc = failed to pull and unpack image \"{img}\": "
              "failed to resolve reference \"{img}\": {img}: not found")  # fmt: skip
    return _pull(ctx, detail, ("not found", "NotFound", "manifest unknown", "does not exist", "ErrImagePull", "ImagePullBackOff"))


def image_401(ctx: Ctx) -> Fault:
    detail = ("rpc error: code = Unknown desc = failed to pull and unpack image \"{img}\": failed to "
              "resolve reference \"{img}\": failed to authorize: failed to fetch oauth token: unexpected "
              "status from GET request to https://{reg}/oauth2/token?scope=repository%3A{repo}%3Apull: 401 Unauthorized")  # fmt: skip
    reg = "registry"
    return _pull(ctx, detail.replace("{reg}", reg).replace("{repo}", "app"),
                 ("401", "unauthorized", "ErrImagePull", "ImagePullBackOff", "authoriz", "imagePullSecret"))  # fmt: skip


def image_403(ctx: Ctx) -> Fault:
    detail = ("rpc error: code = Unknown desc = failed to pull and unpack image \"{img}\": failed to "
              "resolve reference \"{img}\": unexpected status from HEAD request to https://registry/v2/app/manifests/latest: 403 Forbidden")  # fmt: skip
    return _pull(ctx, detail, ("403", "forbidden", "ErrImagePull", "ImagePullBackOff", "denied"))


# -- config errors --------------------------------------------------------------------------


def _config_error(ctx: Ctx, message: str, reasons: tuple[str, ...], *, event: str | None = None,
                  **cargs: Any) -> Fault:  # fmt: skip
    k = ctx.k
    app = ctx.name()
    c = container(ctx, app, **cargs)
    rollout = k.rng.randint(15, 60) * MINUTE
    n = k.rng.randint(1, 2)
    w = k.deployment(app, [c], replicas=n, ready=0, rollout=rollout)
    pods = []
    for _ in range(n):
        node = ctx.node()
        pod = k.pod(w, [], phase="Pending", node=node, age=rollout - 3)
        msg = message.format(pod=pod_ref(pod, ctx.ns), c=app, ns=ctx.ns)
        pod["status"]["containerStatuses"] = [waiting(ctx, c, "CreateContainerConfigError", msg)]
        scheduled_event(ctx, pod, node, ago=rollout - 3)
        fp = f"spec.containers{{{app}}}"
        tries = k.rng.randint(10, 60)
        k.event(pod, "Pulled", f'Container image "{c["image"]}" already present on machine', type_="Normal",
                count=tries, seen=(rollout - 4, k.rng.randint(5, 60)), field_path=fp)  # fmt: skip
        k.event(pod, "Failed", f"Error: {msg}", count=tries, seen=(rollout - 4, k.rng.randint(5, 60)),
                field_path=fp)  # fmt: skip
        pods.append(pod)
    k.service(app, {"app": app})
    return Fault(roots=(root(ctx, "Deployment", app),), reasons=reasons,
                 symptoms=_symptoms(ctx, w, pods), subject=app, symptom=Symptom.PENDING)  # fmt: skip


def configmap_missing(ctx: Ctx) -> Fault:
    cm = ctx.k.rng.choice(["app-config", "feature-flags", "settings"])
    env = [{"name": "CONFIG", "valueFrom": {"configMapKeyRef": {"name": cm, "key": "config.yaml"}}}]
    return _config_error(ctx, f'configmap "{cm}" not found', ("CreateContainerConfigError", "not found", cm), env=env)


def secret_missing(ctx: Ctx) -> Fault:
    sec = ctx.k.rng.choice(["db-credentials", "api-keys", "stripe-secret"])
    env = [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": sec, "key": "password"}}}]
    return _config_error(ctx, f'secret "{sec}" not found', ("CreateContainerConfigError", "not found", sec), env=env)


def configmap_key_missing(ctx: Ctx) -> Fault:
    cm = ctx.k.rng.choice(["app-config", "runtime-settings"])
    key = ctx.k.rng.choice(["DATABASE_HOST", "CACHE_URL", "FEATURE_FLAGS"])
    env = [{"name": key, "valueFrom": {"configMapKeyRef": {"name": cm, "key": key}}}]
    ctx.k.add("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": ctx.k.meta(cm, created=9 * 86400), "data": {"LOG_LEVEL": "…"}})  # fmt: skip
    return _config_error(ctx, f"couldn't find key {key} in ConfigMap {{ns}}/{cm}",
                         ("CreateContainerConfigError", "couldn't find key", key), env=env)  # fmt: skip


def run_as_non_root(ctx: Ctx) -> Fault:
    msg = 'container has runAsNonRoot and image will run as root (pod: "{pod}", container: {c})'
    return _config_error(ctx, msg, ("runAsNonRoot", "run as root", "runAsUser"),
                         securityContext={"runAsNonRoot": True, "allowPrivilegeEscalation": False})  # fmt: skip


# -- volumes ------------------------------------------------------------------------------


def failed_mount_secret(ctx: Ctx) -> Fault:
    k = ctx.k
    app = ctx.name()
    sec = k.rng.choice(["tls-cert", "app-secrets", "gcp-sa-key"])
    c = container(ctx, app, volumeMounts=[{"name": "secrets", "mountPath": "/etc/secrets", "readOnly": True}])
    rollout = k.rng.randint(15, 60) * MINUTE
    w = k.deployment(app, [c], replicas=1, ready=0, rollout=rollout,
                     volumes=[{"name": "secrets", "secret": {"secretName": sec, "defaultMode": 420}}])  # fmt: skip
    node = ctx.node()
    pod = k.pod(w, [waiting(ctx, c, "ContainerCreating")], phase="Pending", node=node, age=rollout - 3)
    scheduled_event(ctx, pod, node, ago=rollout - 3)
    k.event(pod, "FailedMount", f'MountVolume.SetUp failed for volume "secrets" : secret "{sec}" not found',
            count=k.rng.randint(8, 30), seen=(rollout - 4, k.rng.randint(10, 120)))  # fmt: skip
    k.service(app, {"app": app})
    return Fault(roots=(root(ctx, "Deployment", app),), reasons=("FailedMount", "not found", sec),
                 symptoms=_symptoms(ctx, w, [pod]), subject=app, symptom=Symptom.STUCK)  # fmt: skip


def _pvc(ctx: Ctx, name: str, *, phase: str, sc: str | None, volume: str | None = None) -> Obj:
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}},
                 "volumeMode": "Filesystem"}  # fmt: skip
    if sc:
        spec["storageClassName"] = sc
    if volume:
        spec["volumeName"] = volume
    status: Obj = {"phase": phase}
    if phase == "Bound":
        status.update(accessModes=["ReadWriteOnce"], capacity={"storage": "10Gi"})
    return ctx.k.add("persistentvolumeclaims", {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                                "metadata": ctx.k.meta(name, created=3 * 86400),
                                                "spec": spec, "status": status})  # fmt: skip


def multi_attach(ctx: Ctx) -> Fault:
    """A RollingUpdate Deployment on a ReadWriteOnce claim: the new pod lands on another node
    and cannot attach the volume the old pod holds."""
    k = ctx.k
    app = ctx.name()
    claim = f"{app}-data"
    vol = f"pvc-{k.uid()}"
    _pvc(ctx, claim, phase="Bound", sc=k.rng.choice(["standard-rwo", "gp3", "managed-csi"]), volume=vol)
    c = container(ctx, app, volumeMounts=[{"name": "data", "mountPath": "/var/lib/data"}])
    rollout = k.rng.randint(15, 60) * MINUTE
    w = k.deployment(app, [c], replicas=1, ready=0, rollout=rollout,
                     volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])  # fmt: skip
    old_node, new_node = ctx.nodes.workers[0], ctx.nodes.workers[1]
    old_rs = next(r for r in k.items("replicasets") if r["metadata"]["name"].startswith(app + "-")
                  and r["metadata"]["name"] != w.owner.name)  # fmt: skip
    old_w = Workload(kind="Deployment", name=app, labels=dict(w.labels), obj=w.obj, top=w.top,
                     owner=Ref(kind="ReplicaSet", name=old_rs["metadata"]["name"],
                                         uid=old_rs["metadata"]["uid"], api_version="apps/v1"))  # fmt: skip
    old = k.pod(old_w, [running(ctx, c, since=6 * 86400, ready=False)], node=old_node, age=6 * 86400)
    old["metadata"]["deletionTimestamp"] = k.ago(rollout - 10)
    new = k.pod(w, [waiting(ctx, c, "ContainerCreating")], phase="Pending", node=new_node, age=rollout - 3)
    scheduled_event(ctx, new, new_node, ago=rollout - 3)
    k.event(new, "FailedAttachVolume",
            f'Multi-Attach error for volume "{vol}" Volume is already used by pod(s) {old["metadata"]["name"]}',
            seen=(rollout - 4, rollout - 4), source=("attachdetach-controller", ""))  # fmt: skip
    k.event(new, "FailedMount", "Unable to attach or mount volumes: unmounted volumes=[data], unattached "
            "volumes=[data], failed to process volumes=[]: timed out waiting for the condition",
            count=k.rng.randint(5, 20), seen=(rollout - 120, k.rng.randint(20, 120)))  # fmt: skip
    k.service(app, {"app": app})
    return Fault(roots=(root(ctx, "Deployment", app, ("PersistentVolumeClaim", claim)),),
                 reasons=("Multi-Attach", "FailedAttachVolume", "ReadWriteOnce", "already used"),
                 symptoms=(*_symptoms(ctx, w, [new, old]), ent(ctx, "PersistentVolumeClaim", claim)),
                 subject=app, symptom=Symptom.STUCK)  # fmt: skip


def pvc_unbound(ctx: Ctx) -> Fault:
    k = ctx.k
    app = ctx.name()
    claim = f"data-{app}"
    pvc = _pvc(ctx, claim, phase="Pending", sc=None)
    c = container(ctx, app, volumeMounts=[{"name": "data", "mountPath": "/data"}])
    rollout = k.rng.randint(15, 60) * MINUTE
    w = k.deployment(app, [c], replicas=1, ready=0, rollout=rollout,
                     volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])  # fmt: skip
    n = len(k.nodes)
    pod = k.pod(w, [], phase="Pending", node=None, age=rollout - 3, conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": k.ago(rollout - 3),
         "message": f"0/{n} nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: "
                    f"0/{n} nodes are available: {n} Preemption is not helpful for scheduling."}])  # fmt: skip
    k.event(pod, "FailedScheduling", pod["status"]["conditions"][0]["message"], count=k.rng.randint(3, 12),
            seen=(rollout - 3, k.rng.randint(30, 300)), source=("default-scheduler", ""))  # fmt: skip
    k.event(pvc, "FailedBinding", "no persistent volumes available for this claim and no storage class is set",
            type_="Normal", count=k.rng.randint(40, 200), seen=(rollout, k.rng.randint(5, 30)),
            source=("persistentvolume-controller", ""))  # fmt: skip
    k.service(app, {"app": app})
    return Fault(roots=(root(ctx, "PersistentVolumeClaim", claim, ("Deployment", app)),),
                 reasons=("FailedBinding", "no storage class", "storageClassName", "unbound"),
                 symptoms=_symptoms(ctx, w, [pod]), subject=app, symptom=Symptom.PENDING)  # fmt: skip


CONTAINER_FAULTS: dict[str, FaultFn] = {
    "app_error": app_error, "completed_loop": completed_loop, "exec_format": exec_format,
    "oomkilled": oomkilled, "db_auth": db_auth, "dns_failure": dns_failure,
    "conn_refused": conn_refused, "tls_expired": tls_expired,
    "image_not_found": image_not_found, "image_401": image_401, "image_403": image_403,
    "configmap_missing": configmap_missing, "secret_missing": secret_missing,
    "configmap_key_missing": configmap_key_missing, "run_as_non_root": run_as_non_root,
    "start_error": start_error, "init_crash": init_crash,
    "failed_mount_secret": failed_mount_secret, "multi_attach": multi_attach, "pvc_unbound": pvc_unbound,
}  # fmt: skip
