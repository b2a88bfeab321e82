"""``loopkernel sre kb``: index runbooks into the store, search them, list what is indexed.

::

    loopkernel sre kb add PATH... [--runbooks] [--db URL]   Markdown files or folders
    loopkernel sre kb search "QUERY" [--limit N] [--json]
    loopkernel sre kb list

``add`` replaces a file's passages when it is indexed again; ``--runbooks`` adds the
runbooks shipped with the investigator. ``loopkernel investigate ... --kb`` then lets the
playbooks search the same database.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_kb_parser"]


def add_kb_parser(sre_sub: Any) -> None:
    kb = sre_sub.add_parser("kb", help="the runbooks the investigation searches (kb_search)")
    kb_sub = kb.add_subparsers(dest="kb_command", required=True, metavar="COMMAND")
    add = kb_sub.add_parser("add", help="index Markdown runbooks and incident write-ups")
    add.add_argument("paths", nargs="*", metavar="PATH", help="a Markdown file or a folder")
    add.add_argument("--runbooks", action="store_true", help="the runbooks shipped with sre")
    add.set_defaults(func=cmd_kb_add)
    find = kb_sub.add_parser("search", help="search the indexed passages")
    find.add_argument("query")
    find.add_argument("--limit", type=int, default=3, help="passages to show (3)")
    find.add_argument("--json", action="store_true", help="print the hits as JSON")
    find.set_defaults(func=cmd_kb_search)
    listing = kb_sub.add_parser("list", help="the indexed files and their passages")
    listing.set_defaults(func=cmd_kb_list)
    for p in (add, find, listing):
        p.add_argument("--db", default=argparse.SUPPRESS, help="database (default $LOOPKERNEL_DB)")


async def cmd_kb_add(args: argparse.Namespace) -> int:
    from loopkernel import UsageError
    from loopkernel.client import Client
    from loopkernel_apps.sre._kb import add_files, shipped_runbooks

    paths = [*args.paths, *([shipped_runbooks()] if args.runbooks else [])]
    if not paths:
        raise UsageError("give a Markdown file or folder to index, or --runbooks")
    async with Client(getattr(args, "db", None)) as client:
        try:
            done = await add_files(client.store, paths)
        except FileNotFoundError as exc:
            raise UsageError(str(exc)) from None
    for name, n in done:
        print(f"{name}: {n} passages")
    print(f"{len(done)} files indexed")
    return 0


async def cmd_kb_search(args: argparse.Namespace) -> int:
    from loopkernel.client import Client
    from loopkernel_apps.sre._kb import search

    async with Client(getattr(args, "db", None), create=False) as client:
        hits = await search(client.store, args.query, limit=max(1, args.limit))
    if args.json:
        print(json.dumps([h.to_json() for h in hits], indent=2))
    for h in [] if args.json else hits:
        print(f"{h.file} § {h.heading}  (score {h.score:.4f})\n  {h.excerpt[:200]}")
    return 0


async def cmd_kb_list(args: argparse.Namespace) -> int:
    from loopkernel.client import Client

    async with Client(getattr(args, "db", None), create=False) as client:
        files = await client.store.files()
    for name, n in files:
        print(f"{name}: {n} passages")
    return 0
