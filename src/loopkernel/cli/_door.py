"""What the ``loopkernel`` command says at its door: refusals on one line, libraries' log
records on one line (``--verbose`` for the rest), a missing extra named with its install,
and commands printed so that they work pasted (``--db`` given, no password repeated)."""

from __future__ import annotations

import argparse
import logging
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, NoReturn

from loopkernel.cli._render import one_line
from loopkernel.errors import install_hint

__all__ = [
    "LOG_LEVELS",
    "Parser",
    "add_logging_flags",
    "db_flag",
    "extra_for",
    "missing_extra",
    "prog",
    "resume_command",
    "setup_logging",
    "shown_url",
    "version",
]


class Parser(argparse.ArgumentParser):
    """Refusals on one line (``loopkernel run: error: ...``): the usage block is for
    ``--help``, or follows the line with ``--verbose``. Subcommands inherit the class."""

    def error(self, message: str) -> NoReturn:
        from loopkernel.models._scrub import quiet  # never echo a value that looks like a key

        message = quiet(one_line(message))
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        if "--verbose" in sys.argv[1:] or "-v" in sys.argv[1:]:
            self.print_usage(sys.stderr)
        raise SystemExit(2)  # the usage error's exit code, as argparse's own


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("loopkernel")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown (not installed)"


LOG_LEVELS = ("debug", "info", "warning", "error")


class _OneLine(logging.Formatter):
    """A library's log record (psycopg's pool, OpenTelemetry's exporter) as one line on
    stderr, without its traceback: ``--verbose`` shows the whole record."""

    def format(self, record: logging.LogRecord) -> str:
        return f"loopkernel: {record.name}: {one_line(record.getMessage())}"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to whatever ``sys.stderr`` is when a record comes (a test's
    capture, a redirect made after start-up), never to a stream closed since."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def setup_logging(args: argparse.Namespace) -> None:
    """Libraries' warnings as one line each; ``--verbose`` / ``--log-level`` for more."""
    verbose = bool(getattr(args, "verbose", False))
    level_name = getattr(args, "log_level", None) or ("info" if verbose else "warning")
    handler = _Stderr()
    if verbose:
        handler.setFormatter(logging.Formatter("loopkernel: %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(_OneLine())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level_name.upper()))
    if not verbose and getattr(args, "log_level", None) is None:
        # "Loop ... that handles pid N is closed": a tool server that exits after the
        # command's loop has closed (Ctrl-C) is no news; asyncio's errors still show
        logging.getLogger("asyncio").setLevel(logging.ERROR)


def add_logging_flags(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``--verbose`` and ``--log-level``: before the command name, or after it."""
    default: Any = None if top else argparse.SUPPRESS
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default if not top else False,
        help="full log records and tracebacks of libraries (psycopg, OpenTelemetry) on "
        "stderr, and the usage block after a refused command line",
    )
    p.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=default,
        help="the least severe log record shown (default warning; info with --verbose)",
    )


def resume_command(args: argparse.Namespace, run: str) -> str:
    """``loopkernel [--db DB] resume RUN``: with ``--db`` whenever one was given, so that
    the line works pasted as it is."""
    return f"{prog()}{db_flag(args)} resume {shlex.quote(str(run))}"


def prog() -> str:
    """The command as a printed hint spells it: ``loopkernel`` when that name on PATH is
    the program running, else the path it was started by (``.venv/bin/loopkernel`` after
    ``bash scripts/demo``, where the virtualenv is not activated), so the hint works pasted."""
    started = Path(sys.argv[0])
    if started.name != "loopkernel":  # python -m loopkernel, or called in-process
        return "loopkernel"
    found = shutil.which("loopkernel")
    if found and Path(found).resolve() == started.resolve():
        return "loopkernel"
    try:
        shown = str(started.absolute().relative_to(Path.cwd()))
    except ValueError:
        shown = str(started.absolute())
    return shlex.quote(shown if "/" in shown else f"./{shown}")


def db_flag(args: argparse.Namespace) -> str:
    """`` --db DB`` when the command line named one, else nothing."""
    db = getattr(args, "db", None)
    if db is None:
        return ""
    return f" --db {shlex.quote(shown_url(str(db).removeprefix('sqlite:///')))}"


def shown_url(url: str) -> str:
    """A store's URL as the command prints it: a password (in the authority or as a
    ``password=`` query parameter) as ``PASSWORD``, never repeated. A path is unchanged."""
    if "://" not in url:
        return url
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        password, port = parts.password, parts.port
    except ValueError:  # not a URL one can take apart: show none of its authority
        return url.partition("://")[0] + "://?"
    query = parse_qsl(parts.query, keep_blank_values=True)
    secret_query = any(k.lower() == "password" for k, _ in query)
    if password is None and not secret_query:
        return url  # as given: urlunsplit would spell sqlite:///x as sqlite:/x
    if password is not None:
        netloc = f"{parts.username or ''}:PASSWORD@{parts.hostname or ''}"
        netloc += f":{port}" if port else ""
        parts = parts._replace(netloc=netloc)
    if secret_query:
        masked = [(k, "PASSWORD" if k.lower() == "password" else v) for k, v in query]
        parts = parts._replace(query=urlencode(masked, safe="/"))
    return urlunsplit(parts)


def extra_for(module: str) -> str | None:
    """The extra of this package that provides ``module`` (``jsonschema`` -> ``tools``),
    from the installed metadata; None when no extra does."""
    import re
    from importlib.metadata import PackageNotFoundError, requires

    top = module.partition(".")[0].lower()
    if not top:
        return None
    try:
        reqs = requires("loopkernel") or []
    except PackageNotFoundError:
        return None
    found: list[str] = []
    for req in reqs:
        m = re.match(r"^\s*([A-Za-z0-9_.-]+).*extra\s*==\s*['\"]([^'\"]+)['\"]", req)
        if m is None or m.group(2) in ("dev", "bench", "local-model"):
            continue
        dist = m.group(1).lower()
        if top in (dist.replace("-", "_"), dist.split("-")[0]):
            found.append(m.group(2))
    # jsonschema is in two extras: the runtime's (tools) before the gateway's (models)
    return min(found, key=lambda extra: (extra != "tools", extra), default=None)


def missing_extra(extra: str, exc: ImportError) -> str:
    """The one line for a missing optional dependency, with the command that installs it
    (LoopKernel is not published yet: ``loopkernel._install``)."""
    return f"this needs the {extra} extra: {install_hint(extra)} ({exc})"
