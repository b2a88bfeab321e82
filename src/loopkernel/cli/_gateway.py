"""``loopkernel gateway ...``: hands every argument to the gateway's own command line.

The gateway package is imported only when this command runs, so no other command (and no
run) ever loads it or a provider SDK.
"""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "run_gateway"]


def run_gateway(argv: list[str]) -> int:
    from loopkernel.gateway._cli import main

    return main(argv)


def _run(args: argparse.Namespace) -> int:
    return run_gateway(args.gateway_args)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "gateway",
        help="start the model gateway (holds provider keys; see docs/models.md)",
        add_help=False,
    )
    p.add_argument("gateway_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=_run)
