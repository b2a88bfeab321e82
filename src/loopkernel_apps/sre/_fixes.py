"""Fixes as a service: a remediation proposed by one user, approved by another where the
namespace says so, carried out once (``docs/sre.md``, "Carrying out an approved fix").

::

    async with Client(db) as client:
        fixes = Fixes(client, load_people("service.json"))
        run = await fixes.propose(user="alice", namespace="shop", cluster="eu",
                                  plan={"tool": "scale", "args": {...}}, from_run=inv)
        await fixes.approve(user="bob", run_id=run)     # alice herself: FixRefused

``propose`` checks the user's scope (namespace and cluster) and starts a fix run
(``fix._app``) whose ``service`` parameter journals who requested it, from which
investigation, and whether the namespace separates duties; the run parks at ``apply``
before anything is written. ``approve`` journals the answer with the approver's name (the
``human_input``'s ``by`` and its payload's ``approved_by``) and runs the fix: the write goes
out once, then the re-check; ``answer`` only journals it (the page's approval: the
inspector's background executor then runs the fix). An answer by the requester in a
namespace that separates duties is journaled too, and refused by the run itself
(``fix._app.refusal``: parked again with the reason, nothing sent); ``approve`` then raises
``FixRefused`` with that one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loopkernel import JSON, UsageError
from loopkernel.client import Answerer, Client
from loopkernel_apps.sre._people import People, ScopeRefused, User, check_scope
from loopkernel_apps.sre.fix._app import refusal

__all__ = ["FIX_APP", "FixOutcome", "FixRefused", "Fixes"]

FIX_APP = "loopkernel_apps.sre.fix._app:app"
"""The fix run's app, by module (started only by a fix, never by an investigation)."""
VIA = "sre service"


class FixRefused(ScopeRefused):
    """An approval the fix's rules refuse (journaled, and the fix still waits)."""

    code = "fix_refused"


@dataclass(frozen=True, kw_only=True, slots=True)
class FixOutcome:
    """Where a fix stands after an answer."""

    run_id: str
    status: str
    """The run's status: ``waiting`` (for an approval), ``succeeded``, ``failed`` …"""
    took: bool | None
    """The re-check's verdict, once the run ended."""
    requested_by: str
    approved_by: str | None


class Fixes:
    """The fix service over one open ``Client``; ``people`` None: no table, anyone may
    propose and approve (a local command line), no separation of duties."""

    def __init__(self, client: Client, people: People | None) -> None:
        self.client = client
        self.people = people

    def user(self, name: str) -> User:
        if self.people is None:
            return User(name=name, namespaces=frozenset({"*"}))
        return self.people.user(name)

    def api_of(self, who: User, namespace: str, cluster: str) -> str:
        """The API server's URL of ``cluster`` (the table's ``api``), in ``who``'s scope;
        without a table ``cluster`` is the URL itself."""
        if self.people is None:
            check_scope(who, namespace, "")
            return cluster
        check_scope(who, namespace, "", cluster)
        api = (self.people.clusters.get(cluster) or {}).get("api")
        if not api:
            raise UsageError(f"this server has no cluster named {cluster!r} with an 'api' URL")
        return str(api)

    async def propose(
        self,
        *,
        user: str,
        namespace: str,
        cluster: str,
        plan: Mapping[str, JSON],
        from_run: str | None = None,
        run_id: str | None = None,
    ) -> str:
        """Start a fix run, parked until approved; its run id. Refused before anything is
        journaled when the user may not read the namespace or the cluster."""
        who = self.user(user)
        api = self.api_of(who, namespace, cluster)
        service: dict[str, JSON] = {
            "requested_by": who.name,
            "separate_duties": self.people is not None and self.people.separates(namespace),
            "cluster": cluster,
            "from_run": from_run,
        }
        overrides: dict[str, JSON] = {
            "plan": dict(plan),
            "namespace": namespace,
            "api": api,
            "service": service,
        }
        _, started = await self.client.start(FIX_APP, overrides=overrides, run_id=run_id)
        await self.client.execute(started.run_id)  # to the park: nothing is written before
        return str(started.run_id)

    async def approve(self, *, user: str, run_id: str) -> FixOutcome:
        """Journal ``user``'s approval and carry the fix out here (or refuse it:
        ``FixRefused``, the run parked again saying why)."""
        why = await self.answer(user=user, run_id=run_id)
        await self.client.execute(run_id)
        if why is not None:
            raise FixRefused(why)
        return await self.outcome(run_id)

    async def answer(self, *, user: str, run_id: str) -> str | None:
        """Journal ``user``'s approval only (whoever executes the run next carries it out,
        or parks it again); why the run will refuse it, or ``None``."""
        who = self.user(user)
        params = await self._params(run_id)
        check_scope(who, str(params["namespace"]), "")
        payload: dict[str, JSON] = {"approved_by": who.name}
        await self.client.decide(
            run_id,
            "apply",
            "approve",
            payload=payload,
            answerer=Answerer(local=True, by={"name": who.name, "via": VIA}),
        )
        return refusal(params, payload)

    async def outcome(self, run_id: str) -> FixOutcome:
        info = await self.client.info(run_id)
        params = await self._params(run_id)
        tasks = {t["task_id"]: t for t in (await self.client.inspect(run_id)).tasks}
        done: Any = (tasks.get("apply") or {}).get("result") or {}
        checked: Any = (tasks.get("recheck") or {}).get("result") or {}
        took = checked.get("took") if isinstance(checked, Mapping) else None
        service: Any = params.get("service") or {}
        return FixOutcome(
            run_id=run_id,
            status=info.status.value,
            took=took if isinstance(took, bool) else None,
            requested_by=str(service.get("requested_by") or ""),
            approved_by=done.get("approved_by") if isinstance(done, Mapping) else None,
        )

    async def decisions(self, run_id: str) -> list[dict[str, Any]]:
        """The fix's journal as a person reads it: each park (why), each answer (who, and
        whether the run refuses it: ``refused``)."""
        from loopkernel import EventKind
        from loopkernel.client import approver_text

        params = await self._params(run_id)
        out: list[dict[str, Any]] = []
        for e in await self.client.events(run_id):
            data: Any = e.data if isinstance(e.data, Mapping) else {}
            if e.kind is EventKind.APPROVAL_REQUIRED:
                out.append({"seq": e.seq, "kind": "parked", "text": str(data.get("reason"))})
            elif e.kind is EventKind.HUMAN_INPUT:
                who = approver_text(data.get("by"))
                refused = refusal(params, data.get("payload")) is not None
                decision = str(data.get("decision"))
                out.append({"seq": e.seq, "kind": decision, "text": who, "refused": refused})
        return out

    async def _params(self, run_id: str) -> dict[str, Any]:
        info = await self.client.info(run_id)
        if info.app != FIX_APP or not isinstance(info.params, dict):
            raise UsageError(f"run {run_id} is not a fix")
        return dict(info.params)
