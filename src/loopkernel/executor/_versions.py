"""Code that changes under a running run: what a resume by another app version may do.

What always holds, whatever the version: a journaled patch is never planned again (the
patches' unique ``(run_id, event_seq)``), and a finished task never runs again. So most
changes are safe. Two are not, and a resume refuses them before it writes anything
(``IncompatibleVersion``):

- the app declares it cannot resume runs of the run's version
  (``App(compatible_with=(...))`` does not list it);
- a task that still has to run (not finished) names a skill this version's worker registry
  no longer has: it could never run.

A run journaled before versions were recorded has none; it counts as version ``"0"``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from loopkernel.errors import IncompatibleVersion
from loopkernel.graph import TERMINAL_TASK, Task
from loopkernel.ids import RunId
from loopkernel.store._lease import UNVERSIONED

__all__ = ["UNVERSIONED", "check_resumable"]


def check_resumable(
    *,
    run_id: RunId,
    run_version: str | None,
    app_version: str | None,
    compatible_with: Collection[str] | None,
    tasks: Iterable[Task],
    skills: Collection[str],
) -> None:
    """``IncompatibleVersion`` when this app version must not resume the run."""
    started = run_version or UNVERSIONED
    this = app_version or UNVERSIONED
    if started != this and compatible_with is not None and started not in compatible_with:
        known = ", ".join(sorted(compatible_with)) or "none"
        raise IncompatibleVersion(
            f"run {run_id} was started by version {started} of its app; version {this} "
            f"resumes only runs of versions {known} (App.compatible_with): resume it with "
            f"version {started}, or declare it compatible",
            run_id=run_id,
            run_version=started,
            app_version=this,
        )
    missing = sorted(
        {t.skill for t in tasks if t.state not in TERMINAL_TASK and t.skill not in skills}
    )
    if missing:
        raise IncompatibleVersion(
            f"run {run_id} (version {started}) has tasks still to run with skill(s) "
            f"{', '.join(missing)}, which version {this} of its app no longer registers: "
            f"resume it with a version that does",
            run_id=run_id,
            run_version=started,
            app_version=this,
            skills=missing,
        )
