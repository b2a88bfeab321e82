"""``loopkernel sre fix``: propose a fix, approve it, see where it stands (``_fixes``).

::

    loopkernel sre fix propose --user U --namespace NS --cluster C --plan JSON [--from RUN]
    loopkernel sre fix plan RUN [--json]       the plans an investigation's report proposes
    loopkernel sre fix approve RUN --user U    (refused for the requester where duties separate)

``--cluster`` names a cluster of the service table (its ``api`` URL); without a table
(``--people``/``$LOOPKERNEL_SRE_SERVICE`` unset) it is the API server's URL itself.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_fix_parser"]


def add_fix_parser(sre_sub: Any) -> None:
    fix = sre_sub.add_parser("fix", help="propose and approve a remediation (a parked write)")
    fix_sub = fix.add_subparsers(dest="fix_command", required=True, metavar="COMMAND")
    prop = fix_sub.add_parser("propose", help="start a fix run, parked until approved")
    prop.add_argument("--namespace", required=True)
    prop.add_argument("--cluster", required=True, help="a cluster of the service table")
    prop.add_argument("--plan", help='{"tool": ..., "args": {...}} (default: the report\'s)')
    prop.add_argument("--from", dest="from_run", help="the investigation it comes from")
    prop.set_defaults(func=cmd_fix_propose)
    plans = fix_sub.add_parser("plan", help="the write-call plans an investigation proposes")
    plans.add_argument("run_id", metavar="RUN")
    plans.add_argument("--json", action="store_true")
    plans.set_defaults(func=cmd_fix_plan)
    ok = fix_sub.add_parser("approve", help="approve a fix and carry it out, once")
    ok.add_argument("run_id", metavar="RUN")
    ok.set_defaults(func=cmd_fix_approve)
    for p in (prop, ok):
        p.add_argument("--user", help="who acts (default: the login name); journaled")
        p.add_argument("--people", help="the service table (default $LOOPKERNEL_SRE_SERVICE)")
        p.add_argument("--json", action="store_true")
    for p in (prop, plans, ok):
        p.add_argument("--db", default=argparse.SUPPRESS, help="database (default $LOOPKERNEL_DB)")


def _service(args: argparse.Namespace) -> tuple[Any, str]:
    import getpass
    import os

    from loopkernel_apps.sre._people import load_people

    table = args.people or os.environ.get("LOOPKERNEL_SRE_SERVICE")
    return (load_people(table) if table else None), (args.user or getpass.getuser())


async def cmd_fix_propose(args: argparse.Namespace) -> int:
    from loopkernel import UsageError
    from loopkernel.client import Client
    from loopkernel_apps.sre._fixes import Fixes
    from loopkernel_apps.sre._plans import plans_of_run

    people, user = _service(args)
    async with Client(getattr(args, "db", None)) as client:
        if args.plan:
            try:
                plan = json.loads(args.plan)
            except ValueError as exc:
                raise UsageError(f"--plan is not JSON: {exc}") from None
        elif args.from_run:
            found = await plans_of_run(client, args.from_run)
            if not found:
                raise UsageError(f"the report of {args.from_run} proposes no write a fix can make")
            plan = found[0]["plan"]
        else:
            raise UsageError("give --plan JSON, or --from RUN to take the report's first plan")
        run = await Fixes(client, people).propose(
            user=user, namespace=args.namespace, cluster=args.cluster, plan=plan,
            from_run=args.from_run,
        )  # fmt: skip
    print(json.dumps({"run_id": run, "requested_by": user}) if args.json else run)
    return 0


async def cmd_fix_plan(args: argparse.Namespace) -> int:
    from loopkernel.client import Client
    from loopkernel_apps.sre._plans import plans_of_run

    async with Client(getattr(args, "db", None), create=False) as client:
        found = await plans_of_run(client, args.run_id)
    if args.json:
        print(json.dumps(found, indent=2))
    for p in [] if args.json else found:
        print(f"{p['action']}\n  -> {json.dumps(p['plan'])}")
    return 0


async def cmd_fix_approve(args: argparse.Namespace) -> int:
    from loopkernel.client import Client
    from loopkernel_apps.sre._fixes import Fixes

    people, user = _service(args)
    async with Client(getattr(args, "db", None)) as client:
        done = await Fixes(client, people).approve(user=user, run_id=args.run_id)
    if args.json:
        print(json.dumps({"run_id": done.run_id, "status": done.status, "took": done.took,
                          "requested_by": done.requested_by, "approved_by": done.approved_by}))
    else:
        took = {True: "the fix took", False: "the fix did not take", None: "no re-check yet"}
        print(f"{done.run_id}: {done.status}, approved by {done.approved_by} "
              f"(requested by {done.requested_by}); {took[done.took]}")  # fmt: skip
    return 0
