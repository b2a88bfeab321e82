"""An uploaded dump archive, unpacked safely (``.tar``, ``.tar.gz``/``.tgz``, ``.zip``).

Every member is checked before a byte is written, and the archive is refused whole, with
one line naming the member and the rule, when any member

- has an absolute path, or a ``..`` component (it would land outside the folder);
- is a symbolic or hard link (it could point anywhere);
- is a device, a FIFO or anything but a regular file or a folder;
- would make the unpacked total pass ``max_unpacked_bytes``, or the count pass
  ``MAX_MEMBERS`` (a zip bomb).

The upload itself is bounded by the caller (``max_upload_bytes``: read in chunks, refused
as soon as it passes). Files are written 0600 and folders 0700 under a new folder.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from loopkernel import UsageError

__all__ = ["MAX_MEMBERS", "ArchiveRefused", "Member", "unpack"]

MAX_MEMBERS = 20_000
"""Members an archive may hold."""


class ArchiveRefused(UsageError):
    """An uploaded archive refused whole; nothing of it was kept."""

    code = "archive_refused"


@dataclass(frozen=True, kw_only=True, slots=True)
class Member:
    """One entry of an archive, as its format describes it."""

    name: str
    kind: str
    """``file``, ``dir``, ``symlink``, ``hardlink`` or ``device``."""
    size: int


def _check_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise ArchiveRefused(f"refused: the archive holds an absolute path: {name!r}")
    if ".." in path.parts:
        raise ArchiveRefused(f"refused: the archive holds a path with '..': {name!r}")
    return path


def _tar_members(tar: tarfile.TarFile) -> Iterator[tuple[Member, tarfile.TarInfo]]:
    for info in tar:
        if info.issym():
            kind = "symlink"
        elif info.islnk():
            kind = "hardlink"
        elif info.isdir():
            kind = "dir"
        elif info.isreg():
            kind = "file"
        else:
            kind = "device"
        yield Member(name=info.name, kind=kind, size=info.size), info


def _zip_kind(info: zipfile.ZipInfo) -> str:
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "symlink"
    if info.is_dir():
        return "dir"
    if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # 0: a plain file
        return "device"
    return "file"


def _check(members: list[Member], max_unpacked_bytes: int) -> None:
    if len(members) > MAX_MEMBERS:
        raise ArchiveRefused(f"refused: the archive holds over {MAX_MEMBERS} members")
    total = 0
    for m in members:
        _check_name(m.name)
        if m.kind in ("symlink", "hardlink"):
            what = "symbolic link" if m.kind == "symlink" else "hard link"
            raise ArchiveRefused(f"refused: the archive holds a {what}: {m.name!r}")
        if m.kind == "device":
            raise ArchiveRefused(f"refused: the archive holds a device or special file: {m.name!r}")
        total += m.size
        if total > max_unpacked_bytes:
            raise ArchiveRefused(f"refused: the archive unpacks to over {max_unpacked_bytes} bytes")


def _write(root: Path, name: str, data: IO[bytes] | None, room: int) -> int:
    """Write one member (a folder when ``data`` is None); the bytes written. A member that
    turns out longer than its header said is refused when it passes ``room``."""
    target = root.joinpath(*_check_name(name).parts)
    if data is None:
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        return 0
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    written = 0
    with os.fdopen(fd, "wb") as out:
        while chunk := data.read(1 << 16):
            written += len(chunk)
            if written > room:
                raise ArchiveRefused("refused: the archive unpacks to more than its bound")
            out.write(chunk)
    return written


def _unpack_zip(archive: Path, into: Path, bound: int) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        _check([Member(name=i.filename, kind=_zip_kind(i), size=i.file_size) for i in infos], bound)
        for i in infos:
            if i.is_dir():
                _write(into, i.filename, None, bound)
                continue
            with zf.open(i) as data:
                bound -= _write(into, i.filename, data, bound)


def _unpack_tar(archive: Path, into: Path, bound: int) -> None:
    try:
        with tarfile.open(archive) as tar:
            pairs = list(_tar_members(tar))
            _check([m for m, _ in pairs], bound)
            for m, info in pairs:
                data = None if m.kind == "dir" else tar.extractfile(info)
                bound -= _write(into, m.name, data, bound)
    except tarfile.TarError as exc:
        raise ArchiveRefused(f"refused: not a tar or zip archive ({exc})") from None


def unpack(archive: Path, into: Path, *, max_unpacked_bytes: int) -> Path:
    """Unpack ``archive`` into the new folder ``into``; the folder holding the dump (the
    archive's one top folder, if it has one). ``ArchiveRefused`` before anything is written."""
    into.mkdir(mode=0o700, parents=True)
    try:
        if zipfile.is_zipfile(archive):
            _unpack_zip(archive, into, max_unpacked_bytes)
        else:
            _unpack_tar(archive, into, max_unpacked_bytes)
    except BaseException:
        shutil.rmtree(into, ignore_errors=True)
        raise
    entries = list(into.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else into
