"""The SRE tool set, read-only, over stdio.

``python -m loopkernel_apps.sre.tools --dump DUMP --namespace NS [--audit FILE] [--kb URL]``

::

    triage           the namespace's unhealthy workloads and pods, with findings
    list_pods        every pod: phase, readiness, restarts, owner
    describe_pod     status, container states, limits, probes, env, its events
    pod_logs         current or previous instance, last N lines
    events           of the namespace or of one object; stale ones labelled
    workload_status  deployment / replicaset / job / daemonset / statefulset
    rollout_history  a deployment's revisions, and what each changed (image, env, probes)
    node_capacity    capacity, allocatable, conditions and taints per node
    services         each Service's selector against the pods' labels (its endpoints)
    claims           the PersistentVolumeClaims the pods mount, and the events on them
    autoscalers      HorizontalPodAutoscalers: replicas against min/max, conditions
    kb_search        passages of the indexed runbooks (``--kb URL``), with file and heading

The triage is ``_triage``, the other reads ``_reads``, the search ``_kb_tool``; the run's
view of the dump (scope, redaction, caps) ``_scope``. All are ``read_only``
(``tool-defs.json``, frozen); writes are another server's (``loopkernel_apps.sre.fix``),
which an investigation never starts. The server, not its caller, holds the scope: the
namespace is given on its command line by the run, and a request naming any other
namespace is answered with ``refused`` set and no data (``kb_search`` reads no namespace).
Every result is redacted (``_redact.redact``) and its ``content`` capped at ``ITEM_CAP``
characters, the cut recorded in ``truncated``; logs keep their tail, everything else its
head.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from loopkernel import JSON
from loopkernel.tools import CallInfo, ToolDefs, ToolHost, ToolSource, load_tool_defs
from loopkernel_apps.sre._dump import Dump, load_dump
from loopkernel_apps.sre.tools._kb_tool import KbSearch
from loopkernel_apps.sre.tools._reads import READS, Read
from loopkernel_apps.sre.tools._scope import ITEM_CAP, Scope

__all__ = ["AUDIT_ENV", "DEFS", "ITEM_CAP", "build_host", "main", "tool_source"]

DEFS = Path(__file__).with_name("tool-defs.json")


@functools.cache
def _defs() -> ToolDefs:
    return load_tool_defs(DEFS)


AUDIT_ENV = "LOOPKERNEL_SRE_AUDIT"
"""A file the server appends one line to per request it serves (``--audit``)."""


def tool_source(
    dump: str, namespace: str, *, timeout: float = 30.0, kb: str | None = None
) -> ToolSource:
    """The tools server for one run: its dump and its namespace (and ``$LOOPKERNEL_SRE_AUDIT``);
    ``kb``: the store URL ``kb_search`` reads."""
    args = ["--dump", os.fspath(Path(dump).resolve()), "--namespace", namespace]
    if kb:
        args += ["--kb", kb]
    if os.environ.get(AUDIT_ENV):
        args += ["--audit", os.fspath(Path(os.environ[AUDIT_ENV]).resolve())]
    return ToolSource.python_module(
        "sre",
        "loopkernel_apps.sre.tools",
        *args,
        defs=_defs(),
        timeouts={name: timeout for name in _defs().names()},
    )


# -- the host --------------------------------------------------------------------------------


def _audit(path: str | None) -> Callable[[CallInfo, dict[str, JSON], bool], None]:
    """Appends one JSON line per request to ``path`` (nothing when ``None``)."""

    def log(call: CallInfo, args: dict[str, JSON], refused: bool) -> None:
        if path is None:
            return
        line = {"key": call.key, "tool": call.tool, "args": args, "refused": refused}
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line, sort_keys=True) + "\n").encode())
        finally:
            os.close(fd)

    return log


_Handler = Callable[[dict[str, JSON], CallInfo], Awaitable[JSON]]
_Log = Callable[[CallInfo, dict[str, JSON], bool], None]


def _scoped(scope: Scope, tool: str, read: Read, log: _Log) -> _Handler:
    """``read`` as a handler: audited, and refused for any namespace but the run's."""

    async def handler(args: dict[str, JSON], call: CallInfo) -> JSON:
        asked = args.get("namespace")
        refused = asked is not None and asked != scope.name
        log(call, args, refused)
        if refused:
            return scope.refuse(tool, str(asked))
        return read(scope, args)

    return handler


def _searched(scope: Scope, kb: KbSearch, log: _Log) -> _Handler:
    async def handler(args: dict[str, JSON], call: CallInfo) -> JSON:
        log(call, args, False)
        return await kb(scope, args)

    return handler


def build_host(
    dump: Dump, namespace: str, *, audit: str | None = None, kb: str | None = None
) -> ToolHost:
    """The tool set over ``dump``, serving ``namespace`` only; ``audit`` logs each request;
    ``kb`` is the store URL ``kb_search`` reads."""
    host = ToolHost(_defs())
    scope = Scope(dump, namespace)
    log = _audit(audit)
    for tool, read in READS.items():
        host.add(tool, _scoped(scope, tool, read, log))
    host.add("kb_search", _searched(scope, KbSearch(kb), log))
    host.check_complete()
    return host


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loopkernel_apps.sre.tools")
    parser.add_argument("--dump", required=True, help="a kubectl cluster-info dump (dir or file)")
    parser.add_argument("--namespace", required=True, help="the only namespace served")
    parser.add_argument("--audit", help="append one JSON line per request served to this file")
    parser.add_argument("--kb", help="the store URL kb_search reads (loopkernel sre kb add)")
    args = parser.parse_args(argv)
    build_host(load_dump(args.dump), args.namespace, audit=args.audit, kb=args.kb).run()
    return 0
