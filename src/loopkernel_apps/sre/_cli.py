"""``loopkernel investigate`` and ``loopkernel sre collect`` (entry point ``loopkernel.commands``).

::

    loopkernel investigate "QUESTION" --dump DIR --namespace NS [--db PATH] [--json]
    loopkernel investigate "QUESTION" --dump DIR --namespace NS --submit [--user NAME]
    loopkernel investigate "QUESTION" --cluster NAME --namespace NS --submit [--user NAME]
    loopkernel investigate "QUESTION" --follow-up RUN [--user NAME]
    loopkernel sre collect --out DIR [--namespace NS ...] [--kubeconfig F] [--context C]
    loopkernel sre kb add PATH... | search QUERY | list        (``_kb_cli``)
    loopkernel sre fix propose | plan RUN | approve RUN         (``_fix_cli``)

``investigate`` starts an ``sre`` run, prints progress on stderr, then the report (Markdown,
or JSON with ``--json``) on stdout; its exit code is the run's (``docs/cli.md``). With
``--submit`` (or ``--follow-up RUN``) it hands the question to the workers instead
(``_service``), as
``--user`` (default: the login name), checked against the service table of ``--people`` or
``$LOOPKERNEL_SRE_SERVICE`` when one is given, and prints the run id; ``--cluster NAME``
(instead of ``--dump``) reads the table's live cluster first, as the page's live source
does (``_service.collect_live``). This
module loads with every ``loopkernel`` command, so it imports nothing heavy at the top.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser"]

MAX_QUESTION = 2000
"""The longest question ``investigate`` takes, in characters."""


def add_parser(sub: Any) -> None:
    from loopkernel.cli import setting

    p = sub.add_parser(
        "investigate",
        help="investigate a Kubernetes incident from a cluster-info dump (the sre app)",
        description="Investigate a Kubernetes incident: read-only tools over a "
        "'kubectl cluster-info dump', deterministic detectors, a cited report.",
    )
    p.add_argument("question", help='what to explain, e.g. "why is payments restarting?"')
    p.add_argument("--dump", help="the dump: a directory or a stdout-form file")
    p.add_argument("--namespace", help="the namespace the tools may read")
    p.add_argument("--db", default=argparse.SUPPRESS, help="database (default $LOOPKERNEL_DB)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--model", action="store_true", help="plan with a model through the gateway")
    p.add_argument("--run-id", help="the run id (default: a random one)")
    p.add_argument("--kb", action="store_true", help="search the runbooks indexed in --db")
    p.set_defaults(started=None)
    p.add_argument("--submit", action="store_true", help="hand it to the workers; print the run id")
    p.add_argument(
        "--cluster", help="with --submit: read this live cluster of the service table now"
    )
    p.add_argument("--follow-up", metavar="RUN", help="a follow-up on a finished investigation")
    p.add_argument("--user", help="who asks (default: the login name); journaled with the run")
    p.add_argument("--people", help="the service's scope table (default $LOOPKERNEL_SRE_SERVICE)")
    p.add_argument(
        "--set",
        action="append",
        type=setting,
        metavar="KEY=VALUE",
        help="a bound: max_rounds, max_tool_calls, max_wall_s, max_evidence_chars",
    )
    p.set_defaults(func=cmd_investigate, parser=p)

    sre = sub.add_parser("sre", help="SRE investigator utilities (collect a dump)")
    sre_sub = sre.add_subparsers(dest="sre_command", required=True, metavar="COMMAND")
    c = sre_sub.add_parser(
        "collect",
        help="write a cluster-info dump (previous logs included) from a live cluster",
        description="Read a live cluster through the official kubernetes client and write "
        "the 'kubectl cluster-info dump --output-directory' layout, plus "
        "NS/POD/logs-C-previous.txt for every restarted container. Needs "
        "pip install -e '.[sre-live]' in a clone.",
    )
    c.add_argument("--out", required=True, help="the directory to write (must not exist)")
    c.add_argument("--namespace", action="append", help="a namespace (repeatable; default all)")
    c.add_argument("--kubeconfig", help="the kubeconfig file (default $KUBECONFIG or ~/.kube)")
    c.add_argument("--context", help="the kubeconfig context")
    c.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    c.set_defaults(func=cmd_collect)
    from loopkernel_apps.sre._kb_cli import add_kb_parser

    add_kb_parser(sre_sub)
    from loopkernel_apps.sre._fix_cli import add_fix_parser

    add_fix_parser(sre_sub)


def cmd_collect(args: argparse.Namespace) -> int:
    from loopkernel import UsageError
    from loopkernel_apps.sre._live import collect

    out = Path(args.out)
    if out.exists():
        raise UsageError(f"{out} exists; give a new directory to --out")
    import os

    umask = os.umask(0o077)  # a cluster's logs and objects: folders 0700, files 0600
    try:
        summary = collect(
            out,
            namespaces=args.namespace,
            kubeconfig=args.kubeconfig,
            context=args.context,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    finally:
        os.umask(umask)
    print(f"dump written to {out}: {summary}")
    return 0


async def cmd_investigate(args: argparse.Namespace) -> int:
    from loopkernel import RunStatus, UsageError
    from loopkernel.cli import EXIT_CODES, Progress
    from loopkernel.client import Client, Listeners

    if args.submit or args.follow_up:
        return await cmd_submit(args)
    _need_dump(args)
    dump = _check_dump(args.dump, args.namespace)
    if args.model:
        from loopkernel.models import ModelClient

        if ModelClient.from_env() is None:
            raise UsageError(
                "--model needs a model gateway: set LOOPKERNEL_GATEWAY and "
                "LOOPKERNEL_GATEWAY_TOKEN (docs/models.md), or leave out --model"
            )
    overrides: dict[str, Any] = dict(args.set or [])
    for key in ("question", "dump", "namespace", "model"):
        if key in overrides:
            raise UsageError(f"give {key} as its own argument, not with --set")
    if len(args.question) > MAX_QUESTION:
        raise UsageError(f"the question may have at most {MAX_QUESTION} characters")
    overrides.update(
        question=args.question, dump=str(dump), namespace=args.namespace, model=args.model
    )
    from loopkernel import load_app

    app = load_app("sre")  # bad --set values and a missing extra: before a database exists
    app.build(app.params(None, overrides))
    async with Client(getattr(args, "db", None)) as client:
        if args.kb:
            overrides["kb"] = _kb_url(client.store.url)
        _, started = await client.start("sre", overrides=overrides, run_id=args.run_id)
        args.started = started.run_id  # Ctrl-C prints the resume command
        from loopkernel.cli import shown_url  # never the URL's password

        print(f"run {started.run_id} started in {shown_url(client.store.url)}", file=sys.stderr)
        outcome = await client.execute(
            started.run_id, listeners=Listeners(observer=Progress(sys.stderr))
        )
        if outcome.status is not RunStatus.SUCCEEDED:
            print(
                f"run {outcome.run_id}: {outcome.status.value} {json.dumps(outcome.verdict)}",
                file=sys.stderr,
            )
            return EXIT_CODES[outcome.status]
        report = await report_of(client, outcome.run_id)
    if args.json:
        print(json.dumps(report["report"], indent=2))
    else:
        print(report["markdown"], end="")
    print(f"report digest {report['digest']} (run {outcome.run_id})", file=sys.stderr)
    return EXIT_CODES[outcome.status]


def _kb_url(url: str) -> str:
    """The store's URL as the tools server (another process) opens it: a SQLite path made
    absolute."""
    return url if "://" in url else str(Path(url).resolve())


async def cmd_submit(args: argparse.Namespace) -> int:
    """``--submit`` / ``--follow-up``: the question to the workers, through the service."""
    import getpass
    import os

    from loopkernel import UsageError
    from loopkernel.client import Client
    from loopkernel_apps.sre._people import load_people
    from loopkernel_apps.sre._service import Investigations

    if args.model or args.set:
        raise UsageError("--submit takes the service's bounds: leave out --model and --set")
    table = args.people or os.environ.get("LOOPKERNEL_SRE_SERVICE")
    people = load_people(table) if table else None
    user = args.user or getpass.getuser()
    dump, source = _submitted_source(args, people, user)
    async with Client(getattr(args, "db", None)) as client:
        svc = Investigations(client, people)
        if args.follow_up:
            run = await svc.follow_up(
                user=user, parent=args.follow_up, question=args.question, run_id=args.run_id
            )
        else:
            run = await svc.ask(
                user=user,
                question=args.question,
                namespace=args.namespace,
                dump=dump,
                source=source,
                run_id=args.run_id,
            )
    if args.json:
        print(json.dumps({"run_id": run, "asked_by": user}))
    else:
        print(run, flush=True)
    return 0


def _submitted_source(args: argparse.Namespace, people: Any, user: str) -> tuple[str, str]:
    """``(dump folder, source kind)`` of a question to submit, its scope checked before a
    database is opened (and, for ``--cluster``, before the cluster is read)."""
    from loopkernel import UsageError
    from loopkernel_apps.sre._people import check_scope
    from loopkernel_apps.sre._service import collect_live

    if args.follow_up:
        return "", ""
    if args.cluster:
        if args.dump or people is None or not args.namespace:
            raise UsageError("--cluster takes --namespace and the service table, not --dump")
        who = people.user(user)
        check_scope(who, args.namespace, args.question)
        return collect_live(people, who, args.cluster, args.namespace), "live"
    _need_dump(args)
    if people is not None:
        check_scope(people.user(user), args.namespace or "", args.question)
    return _absolute(args.dump), "dump"


def _need_dump(args: argparse.Namespace) -> None:
    """Without --follow-up, --dump and --namespace are required (argparse's own refusal)."""
    missing = [f for f, v in (("--dump", args.dump), ("--namespace", args.namespace)) if not v]
    if missing:
        args.parser.error(f"the following arguments are required: {', '.join(missing)}")


def _absolute(path: str) -> str:
    return str(Path(path).resolve())


def _check_dump(path: str, namespace: str) -> Path:
    """The dump's absolute path; bad input is one line and exit 2, before anything is written."""
    from loopkernel_apps.sre._dump import load_dump

    dump = Path(path).resolve()
    load_dump(dump).namespace(namespace)
    return dump


async def report_of(client: Any, run_id: str) -> dict[str, Any]:
    """The ``report`` task's result of a finished run."""
    inspection = await client.inspect(run_id)
    for task in inspection.tasks:
        if task["task_id"] == "report" and task["state"] == "succeeded":
            result: dict[str, Any] = task["result"]
            return result
    from loopkernel import UsageError

    raise UsageError(f"run {run_id} has no finished report")
