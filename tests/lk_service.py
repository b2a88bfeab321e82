"""Helpers for the investigation service's tests: a scope table, worker processes."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import tarfile
from pathlib import Path

from lk_helpers import LOOPKERNEL, cli_env
from lk_sre import incident

CASE = "oom-payments"
ALICE = "alice-token-for-the-service-tests"
BOB = "bob-token-for-the-service-tests"


def people_file(tmp: Path, **limits: int) -> Path:
    """alice may investigate ``prod`` (the example's namespace), bob only ``billing``; one
    named dump, uploads under ``tmp/uploads`` bounded at 64 KiB."""
    case = incident(CASE)
    path = tmp / "service.json"
    path.write_text(
        json.dumps(
            {
                "users": {
                    "alice": {"token": ALICE, "namespaces": [case["namespace"]], **limits},
                    "bob": {"token": BOB, "namespaces": ["billing"]},
                },
                "dumps": {"payments": case["dump"]},
                "uploads": str(tmp / "uploads"),
                "max_upload_bytes": 64 * 1024,
            }
        )
    )
    return path


def start_workers(db: str, n: int = 1, concurrency: int = 4) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [*LOOPKERNEL, "--db", db, "worker", "--concurrency", str(concurrency), "--poll", "0.2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            env=cli_env(),
        )
        for _ in range(n)
    ]


def stop_workers(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def tar_with(path: Path, *members: tarfile.TarInfo, data: bytes = b"{}") -> Path:
    """A .tar.gz holding ``members`` (regular files get ``data``)."""
    with tarfile.open(path, "w:gz") as tar:
        for m in members:
            if m.isreg():
                m.size = len(data)
                tar.addfile(m, io.BytesIO(data))
            else:
                tar.addfile(m)
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


def dump_archive(path: Path) -> Path:
    """The example incident's dump as a .tar.gz, under one top folder."""
    with tarfile.open(path, "w:gz") as tar:
        tar.add(incident(CASE)["dump"], arcname="dump")
    return path
