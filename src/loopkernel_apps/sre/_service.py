"""Investigations as a service: questions asked by named users, run by the workers, and
follow-ups that continue a conversation (``docs/sre.md``, "The service").

::

    async with Client(db) as client:
        svc = Investigations(client, load_people("service.json"))
        first = await svc.ask(user="alice", question="why is checkout restarting?",
                              namespace="shop", dump="/srv/dumps/shop-1201")
        # ... a worker (``loopkernel worker``) runs it ...
        second = await svc.follow_up(user="alice", parent=first, question="and its logs?")
        turns = await svc.thread(second)

``ask`` checks the asker's scope (``_people.check_scope``: nothing is read before) and
limits, then starts an ``sre`` run whose ``service`` parameter journals who asked and from
which source, and hands it to the workers (``store.enqueue``, as ``loopkernel submit``
does). ``follow_up`` starts a new run linked to a finished one, in its namespace and on its
dump, with the earlier run's evidence that is still current (``_followup``) and the
conversation so far, and hands it to the workers too. Every run stays resumable on its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopkernel import JSON, RunStatus, UsageError
from loopkernel.client import Client
from loopkernel_apps.sre._people import People, ScopeRefused, User, check_scope

__all__ = ["REUSE_MAX_AGE_S", "Investigations", "Turn", "collect_live", "dump_digest"]

REUSE_MAX_AGE_S = 600.0
"""Evidence read from a live cluster is current this long; a dump's, while the dump is
unchanged."""
MAX_QUESTION = 2000
LIMIT_WINDOW_S = 3600.0
_SCAN = 500
"""Runs read to count a user's recent questions."""
_OPEN = (RunStatus.RUNNING,)


@dataclass(frozen=True, kw_only=True, slots=True)
class Turn:
    """One question of a conversation and where it stands."""

    run_id: str
    question: str
    namespace: str
    asked_by: str
    status: str
    answer: str | None
    """The report's summary, once the run succeeded."""
    parent: str | None
    root: str
    """The conversation's first run."""
    created_at: float
    source: str


def dump_digest(path: str | Path) -> str:
    """A fingerprint of a dump as it is on disk (names, sizes, modification times): the
    evidence read from it is current while this is the same."""
    root = Path(path)
    h = hashlib.sha256()
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for p in files:
        st = p.stat()
        name = p.relative_to(root) if p != root else p.name
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


def _untouched_since(path: str | Path, when: float) -> bool:
    """No file of the dump was modified after ``when`` (epoch seconds)."""
    root = Path(path)
    files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
    return all(p.stat().st_mtime <= when for p in files)


def _service(params: JSON) -> dict[str, Any]:
    found = params.get("service") if isinstance(params, dict) else None
    return dict(found) if isinstance(found, dict) else {}


def turn_of(info: Any) -> Turn:
    """The turn a run row describes."""
    params = info.params if isinstance(info.params, dict) else {}
    svc = _service(params)
    verdict = info.verdict if isinstance(info.verdict, dict) else {}
    answer = verdict.get("summary") if info.status is RunStatus.SUCCEEDED else None
    return Turn(
        run_id=str(info.run_id),
        question=str(params.get("question", "")),
        namespace=str(params.get("namespace", "")),
        asked_by=str(svc.get("asked_by", "")),
        status=info.status.value,
        answer=None if answer is None else str(answer),
        parent=svc.get("parent"),
        root=str(svc.get("root") or info.run_id),
        created_at=float(info.created_at),
        source=str(svc.get("source", "")),
    )


class Investigations:
    """The service over one open ``Client``; ``people`` None: no table, anyone may ask
    anything (a local command line), still journaled with the name given."""

    def __init__(
        self,
        client: Client,
        people: People | None,
        *,
        clock: Callable[[], float] = time.time,
        reuse_max_age_s: float = REUSE_MAX_AGE_S,
    ) -> None:
        self.client = client
        self.people = people
        self.clock = clock
        self.reuse_max_age_s = reuse_max_age_s

    def user(self, name: str) -> User:
        if self.people is None:
            return User(name=name, namespaces=frozenset({"*"}), per_hour=10**9, max_queued=10**9)
        return self.people.user(name)

    async def check_limits(self, user: User) -> None:
        """``ScopeRefused`` when ``user`` asked ``per_hour`` questions in the last hour, or
        has ``max_queued`` not finished (counted from the store: every server and command
        line sees the same count)."""
        since = self.clock() - LIMIT_WINDOW_S
        recent = queued = 0
        for info in await self.client.list_runs(_SCAN, app="sre"):
            if _service(info.params).get("asked_by") != user.name:
                continue
            recent += info.created_at >= since
            queued += info.status in _OPEN
        if queued >= user.max_queued:
            raise ScopeRefused(
                f"refused: {user.name} has {queued} questions not finished "
                f"(at most {user.max_queued}); wait for one to end"
            )
        if recent >= user.per_hour:
            raise ScopeRefused(
                f"refused: {user.name} asked {recent} questions in the last hour "
                f"(at most {user.per_hour})"
            )

    async def ask(
        self,
        *,
        user: str,
        question: str,
        namespace: str,
        dump: str,
        source: str = "dump",
        run_id: str | None = None,
    ) -> str:
        """Start an investigation for the workers; its run id. Refused (``ScopeRefused``,
        ``UsageError``) before anything is read or journaled."""
        who = self.user(user)
        _check_question(question)
        check_scope(who, namespace, question)
        await self.check_limits(who)
        from loopkernel_apps.sre._dump import load_dump

        await asyncio.to_thread(lambda: load_dump(dump).namespace(namespace))
        digest = await asyncio.to_thread(dump_digest, dump)
        service = {"asked_by": who.name, "source": source, "dump_digest": digest}
        return await self._submit(question, namespace, dump, service, run_id)

    async def follow_up(
        self, *, user: str, parent: str, question: str, run_id: str | None = None
    ) -> str:
        """A new run on a finished investigation, linked to it: same namespace and dump,
        the earlier evidence that is still current, the conversation as untrusted context."""
        who = self.user(user)
        _check_question(question)
        info = await self.client.info(parent)
        params = info.params if isinstance(info.params, dict) else {}
        if info.app != "sre":
            raise UsageError(f"run {parent} is not an investigation")
        if info.status is not RunStatus.SUCCEEDED:
            raise UsageError(f"run {parent} is {info.status.value}: follow up a finished one")
        namespace, dump = str(params["namespace"]), str(params["dump"])
        check_scope(who, namespace, question)
        await self.check_limits(who)
        earlier = _service(params)
        digest = await asyncio.to_thread(dump_digest, dump)
        reuse = await self._reusable(parent, earlier, digest, dump)
        history = [
            *earlier.get("history", []),
            {
                "run_id": parent,
                "question": str(params.get("question", "")),
                "answer": turn_of(info).answer,
                "asked_by": earlier.get("asked_by", ""),
            },
        ]
        service = {
            "asked_by": who.name,
            "source": earlier.get("source", "dump"),
            "dump_digest": digest,
            "parent": parent,
            "root": earlier.get("root") or parent,
            "history": history,
            "reuse": reuse,
        }
        return await self._submit(question, namespace, dump, service, run_id)

    async def _reusable(
        self, parent: str, earlier: dict[str, Any], digest: str, dump: str
    ) -> list[dict[str, Any]]:
        """The parent's successful calls whose evidence is current: a dump unchanged since
        (any age), or a live read younger than ``reuse_max_age_s``."""
        from loopkernel_apps.sre._calls import CallStatus
        from loopkernel_apps.sre._run import collected_calls

        inspection = await self.client.inspect(parent)
        started = float(inspection.info.created_at)
        known = earlier.get("dump_digest")
        if known is None:  # asked outside the service: unchanged if nothing is newer than it
            unchanged = await asyncio.to_thread(_untouched_since, dump, started)
        else:
            unchanged = known == digest
        if not unchanged:
            return []  # the dump changed: nothing read from it before is current
        by_task = {t["task_id"]: t["result"] for t in inspection.tasks if t["state"] == "succeeded"}
        now = self.clock()
        out = []
        for call in collected_calls(by_task):
            if call.status is not CallStatus.OK:
                continue  # a refused or failed read is tried again
            was = call.reused or {}
            at = float(was.get("collected_at", started))
            live = earlier.get("source") == "live"
            if live and now - at > self.reuse_max_age_s:
                continue
            out.append(
                {
                    "tool": call.tool,
                    "args": call.args,
                    "result": call.result,
                    "from_run": was.get("from_run", parent),
                    "collected_at": at,
                    "age_s": round(now - at, 3),
                }
            )
        return out

    async def _submit(
        self,
        question: str,
        namespace: str,
        dump: str,
        service: dict[str, Any],
        run_id: str | None,
    ) -> str:
        overrides: dict[str, JSON] = {
            "question": question,
            "namespace": namespace,
            "dump": dump,
            "service": service,
        }
        _, started = await self.client.start("sre", overrides=overrides, run_id=run_id)
        await self.client.store.enqueue(started.run_id)
        return str(started.run_id)

    async def thread(self, run_id: str) -> list[Turn]:
        """The conversation ``run_id`` belongs to, oldest first."""
        root = turn_of(await self.client.info(run_id)).root
        turns = [t for t in await self.recent(_SCAN) if t.root == root]
        return sorted(turns, key=lambda t: (t.created_at, t.run_id))

    async def recent(self, limit: int = 50) -> list[Turn]:
        """The latest investigations, newest first."""
        return [turn_of(i) for i in await self.client.list_runs(limit, app="sre")]


def collect_live(people: People, user: User, cluster: str, namespace: str) -> str:
    """A fresh dump of ``namespace`` from the table's live ``cluster`` through ``sre
    collect``'s client, under the table's uploads folder, once ``user``'s scope allows both;
    its folder. The page's live source and ``investigate --submit --cluster`` (blocking)."""
    import secrets

    from loopkernel_apps.sre._live import collect

    check_scope(user, namespace, "", cluster)
    conf = people.clusters.get(cluster)
    if conf is None:
        raise UsageError(f"this server has no cluster named {cluster!r}")
    root = Path(people.uploads or "uploads")
    out = root / f"live-{cluster}-{int(time.time())}-{secrets.token_hex(4)}"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    collect(
        out, namespaces=[namespace], kubeconfig=conf.get("kubeconfig"), context=conf.get("context")
    )
    return str(out.resolve())


def _check_question(question: str) -> None:
    if not question.strip():
        raise UsageError("ask a question: what should the investigation explain?")
    if len(question) > MAX_QUESTION:
        raise UsageError(f"the question may have at most {MAX_QUESTION} characters")
