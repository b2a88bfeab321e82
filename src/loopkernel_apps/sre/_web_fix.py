"""The fix pages of the Investigations page (``_fixes``): propose the report's plan, approve.

- ``POST /investigations/RUN/fix``: the signed-in user proposes plan N of RUN's report on a
  cluster of the table; the fix run parks before anything is written.
- ``GET /investigations/fixes/FIX``: the plan, who requested it, each park and answer as the
  journal holds them (refused attempts among them), the re-check once it ran.
- ``POST /investigations/fixes/FIX/approve``: approve (``Fixes.answer``): the answer is
  journaled and the page answers at once; the inspector's background executor (the one
  its resume button uses) carries the fix out, and the fix page follows the run live until
  the re-check. Refused with one line for the requester where the namespace separates
  duties, journaled all the same (the run is parked again here, saying why: no write).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from loopkernel import LoopKernelError, UsageError
from loopkernel_apps.sre._fixes import VIA, Fixes, FixRefused
from loopkernel_apps.sre._plans import plans_of_run

if TYPE_CHECKING:
    from loopkernel_apps.sre._web import _Page

__all__ = ["fix_routes"]


def fix_routes(page: _Page) -> list[Route]:
    """The routes, over the Investigations page's ``_Page`` (its host, table and sign-in)."""
    fixes = _FixPages(page)
    return [
        Route("/investigations/{run_id}/fix", fixes.propose, methods=["POST"]),
        Route("/investigations/fixes/{run_id}", fixes.show, methods=["GET"]),
        Route("/investigations/fixes/{run_id}/approve", fixes.approve, methods=["POST"]),
    ]


class _FixPages:
    def __init__(self, page: _Page) -> None:
        self.page = page
        self.host = page.host

    def fixes(self) -> Fixes:
        return Fixes(self.host.client, self.page.people)

    async def _acting(self, request: Request, action: Any) -> Response:
        """Run ``action(user)`` for the form's user; its redirect, or a one-line refusal."""
        try:
            form = await request.form(max_files=0, max_fields=20)
            user, fresh = self.page.who(request, form)
            where = await action(user, form)
        except self.host.refused as exc:
            return self.host.error(request, exc.status, exc.message)
        except LoopKernelError as exc:
            code = 403 if getattr(exc, "code", "") in ("scope_refused", "fix_refused") else 400
            return self.host.error(request, code, str(exc))
        answer = RedirectResponse(where, status_code=303)
        return self.page.remember(answer, user, request) if fresh else answer

    async def propose(self, request: Request) -> Response:
        parent = request.path_params["run_id"]

        async def go(user: Any, form: Any) -> str:
            plans = await plans_of_run(self.host.client, parent)
            index = str(form.get("plan") or "0")
            if not index.isdigit() or int(index) >= len(plans):
                raise UsageError(f"the report of {parent} has no plan {index}")
            info = await self.host.client.info(parent)
            run = await self.fixes().propose(
                user=user.name,
                namespace=str(info.params["namespace"]),
                cluster=str(form.get("cluster") or ""),
                plan=plans[int(index)]["plan"],
                from_run=parent,
            )
            return f"/investigations/fixes/{run}"

        return await self._acting(request, go)

    async def approve(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]

        async def go(user: Any, form: Any) -> str:
            why = await self.fixes().answer(user=user.name, run_id=run_id)
            if why is not None:  # the run parks again, saying why, before anything is sent
                await self.host.client.execute(run_id)
                raise FixRefused(why)
            # journaled; the inspector's background executor carries it out after this
            # answer, and the fix page follows it live
            self.host.execute(run_id, by={"name": user.name, "via": VIA})
            return f"/investigations/fixes/{run_id}"

        return await self._acting(request, go)

    async def show(self, request: Request) -> Response:
        if (denied := self.host.gate(request)) is not None:
            return denied
        run_id = request.path_params["run_id"]
        try:
            fixes = self.fixes()
            outcome = await fixes.outcome(run_id)
            decisions = await fixes.decisions(run_id)
            info = await self.host.client.info(run_id)
        except UsageError:
            return self.host.error(request, 404, f"no fix {run_id}")
        tasks = {t["task_id"]: t for t in (await self.host.client.inspect(run_id)).tasks}
        recheck = (tasks.get("recheck") or {}).get("result")
        last = decisions[-1] if decisions else {}
        answered = last.get("kind") == "approve" and not last.get("refused")
        return self.host.render(
            request,
            "fix.html",
            run_id=run_id,
            outcome=outcome,
            decisions=decisions,
            params=info.params,
            recheck=recheck,
            carrying=outcome.status == "running" or (outcome.status == "waiting" and answered),
            user=self.page.signed_in(request),
        )
