"""The gateway's ledger: one SQLite row per call key, so a repeated key is answered without
a second provider call, and budgets are sums over rows.

A row's life::

    reserve   status 'reserved', reserved_usd / reserved_tokens held against the budgets
              (refused whole, nothing written, when a limit would be passed)
    settle    status 'done' with the answer and its real cost; the reservation is dropped
    fail      status 'failed' with the error (a ModelError is an answer: replayed as such)
    release   the row is deleted (a timeout or an outage: nobody knows the answer, so the
              same key may try again)

A row left 'reserved' by a gateway that died is released when the gateway starts again.
The file (and its WAL sidecars) are created with mode 0600: they hold prompts and answers.

Beside the calls, ``requests`` has one row per request sent to a provider (each retry,
each re-send of a key after a timeout or a gateway crash): ``sent`` when it leaves,
``answered`` / ``failed`` when it comes back, ``lost`` when nobody knows whether the
provider did the work (the deadline cancelled it, the gateway died with it in flight: a
``sent`` row found at start). A lost request is charged its call's reservation: the
provider may have billed it. Spend per run counts calls' costs and reservations plus lost
requests; per day, the same for the UTC day. ``settle`` checks the limits again in the
same transaction as the real cost: an answer that passes one (the provider counted more
than the estimate) is withheld as ``BudgetExceeded``, recorded with its cost, and every
later call of the run is refused. Every write is one ``BEGIN IMMEDIATE`` transaction,
synchronous=FULL.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from loopkernel.errors import BudgetExceeded, ModelError, UsageError
from loopkernel.evidence import redact
from loopkernel.gateway._config import Limits

__all__ = ["Ledger", "LedgerRow", "Reservation", "utc_day"]

_EPSILON = 1e-9

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key             TEXT PRIMARY KEY,
    request_hash    TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    task_id         TEXT,
    provider        TEXT NOT NULL,
    day             TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('reserved', 'done', 'failed')),
    reserved_usd    REAL NOT NULL DEFAULT 0,
    reserved_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd        REAL NOT NULL DEFAULT 0,
    tokens          INTEGER NOT NULL DEFAULT 0,
    answer          TEXT,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS calls_run ON calls (run_id);
CREATE INDEX IF NOT EXISTS calls_day ON calls (day);
CREATE TABLE IF NOT EXISTS requests (
    id              INTEGER PRIMARY KEY,
    key             TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    day             TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('sent', 'answered', 'failed', 'lost')),
    cost_usd        REAL NOT NULL DEFAULT 0,
    tokens          INTEGER NOT NULL DEFAULT 0,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_key ON requests (key);
CREATE INDEX IF NOT EXISTS requests_run ON requests (run_id);
"""

_RUN_SPENT = (
    "SELECT (SELECT COALESCE(SUM(cost_usd + reserved_usd), 0) FROM calls WHERE run_id = ?1) "
    "+ (SELECT COALESCE(SUM(cost_usd), 0) FROM requests WHERE run_id = ?1 AND status = 'lost'), "
    "(SELECT COALESCE(SUM(tokens + reserved_tokens), 0) FROM calls WHERE run_id = ?1) "
    "+ (SELECT COALESCE(SUM(tokens), 0) FROM requests WHERE run_id = ?1 AND status = 'lost')"
)
_DAY_SPENT = (
    "SELECT (SELECT COALESCE(SUM(cost_usd + reserved_usd), 0) FROM calls WHERE day = ?1) "
    "+ (SELECT COALESCE(SUM(cost_usd), 0) FROM requests WHERE day = ?1 AND status = 'lost')"
)


def utc_day(now: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if now is None else now, UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True, kw_only=True, slots=True)
class LedgerRow:
    """What the ledger holds for a key."""

    key: str
    request_hash: str
    status: Literal["reserved", "done", "failed"]
    answer: dict[str, Any] | None
    """The completion (done) or the error verdict (failed)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Reservation:
    key: str
    usd: float
    tokens: int


class Ledger:
    """The ledger file. Synchronous and short: each call is one small transaction."""

    def __init__(self, path: str) -> None:
        self.path = path
        if path != ":memory:":
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                os.close(fd)
                os.chmod(path, 0o600)
            except OSError as err:  # a read-only place, a missing folder: bad configuration
                raise UsageError(
                    f"cannot write the gateway ledger {path}: {err.strerror or err}"
                ) from None
        old = os.umask(0o177)  # the WAL and shm sidecars are created 0600 too
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as err:
            raise UsageError(f"the gateway ledger {path} is not usable: {err}") from None
        finally:
            os.umask(old)
        self.released_at_start = self._release_stale()

    def close(self) -> None:
        self._db.close()

    def _release_stale(self) -> int:
        """Rows a dead gateway left reserved: their answers are unknown, drop them; the
        requests it had in flight are ``lost`` (charged their reservation, already held)."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("UPDATE requests SET status = 'lost' WHERE status = 'sent'")
            cur = db.execute("DELETE FROM calls WHERE status = 'reserved'")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return cur.rowcount

    # -- provider requests -----------------------------------------------------------------

    def request_sent(self, key: str, *, limits: Limits | None = None) -> int:
        """A request for ``key`` (reserved) leaves for the provider: its row id. It holds
        the call's reservation, which it keeps if it is ``lost``.

        With ``limits``, a re-send is refused (``BudgetExceeded``, nothing written) when
        the run's spend, the call's own earlier lost requests included, has reached a
        limit: a call whose every reply is a fault cannot retry past the budget."""
        now = time.time()
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT run_id, day FROM calls WHERE key = ?", (key,)).fetchone()
            if row is not None and limits is not None:
                run_id, day = row
                run_usd, run_tokens = db.execute(_RUN_SPENT, (run_id,)).fetchone()
                (day_usd,) = db.execute(_DAY_SPENT, (day,)).fetchone()
                _check("run_usd", limits.run_usd, run_usd, 0.0, run_id)
                _check("day_usd", limits.day_usd, day_usd, 0.0, run_id)
                _check("run_tokens", limits.run_tokens, run_tokens, 0, run_id)
            cur = db.execute(
                "INSERT INTO requests (key, run_id, day, status, cost_usd, tokens, created_at, "
                "updated_at) SELECT key, run_id, day, 'sent', reserved_usd, reserved_tokens, "
                "?, ? FROM calls WHERE key = ?",
                (now, now, key),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return int(cur.lastrowid or 0)

    def request_done(
        self,
        request_id: int,
        status: Literal["answered", "failed", "lost"],
        *,
        cost_usd: float = 0.0,
        tokens: int = 0,
    ) -> None:
        """How a request came back. ``lost`` keeps the reservation as its cost."""
        if status == "lost":
            self._db.execute(
                "UPDATE requests SET status = 'lost', updated_at = ? WHERE id = ?",
                (time.time(), request_id),
            )
            return
        self._db.execute(
            "UPDATE requests SET status = ?, cost_usd = ?, tokens = ?, updated_at = ? WHERE id = ?",
            (status, cost_usd, tokens, time.time(), request_id),
        )

    def requests(
        self, key: str | None = None, *, run_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The provider requests of a key or a run, oldest first."""
        where, args = ("key = ?", (key,)) if key is not None else ("run_id = ?", (run_id,))
        rows = self._db.execute(
            f"SELECT key, status, cost_usd, tokens FROM requests WHERE {where} ORDER BY id",
            args,
        ).fetchall()
        return [{"key": r[0], "status": r[1], "cost_usd": r[2], "tokens": r[3]} for r in rows]

    def get(self, key: str) -> LedgerRow | None:
        row = self._db.execute(
            "SELECT key, request_hash, status, answer FROM calls WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        return LedgerRow(
            key=row[0],
            request_hash=row[1],
            status=row[2],
            answer=None if row[3] is None else json.loads(row[3]),
        )

    def reserve(
        self,
        *,
        key: str,
        request_hash: str,
        run_id: str,
        task_id: str | None,
        provider: str,
        usd: float,
        tokens: int,
        limits: Limits,
        now: float | None = None,
    ) -> Reservation:
        """Hold ``usd`` and ``tokens`` for a call, or raise ``BudgetExceeded`` (nothing
        written). A key already present raises ``ModelError`` (kind ``duplicate``): the
        caller looks the key up first."""
        now = time.time() if now is None else now
        day = utc_day(now)
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            run_usd, run_tokens = db.execute(_RUN_SPENT, (run_id,)).fetchone()
            (day_usd,) = db.execute(_DAY_SPENT, (day,)).fetchone()
            _check("run_usd", limits.run_usd, run_usd, usd, run_id)
            _check("day_usd", limits.day_usd, day_usd, usd, run_id)
            _check("run_tokens", limits.run_tokens, run_tokens, tokens, run_id)
            try:
                db.execute(
                    "INSERT INTO calls (key, request_hash, run_id, task_id, provider, day, "
                    "status, reserved_usd, reserved_tokens, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, 'reserved', ?, ?, ?, ?)",
                    (key, request_hash, run_id, task_id, provider, day, usd, tokens, now, now),
                )
            except sqlite3.IntegrityError:
                raise ModelError(f"call {key} is already in the ledger", kind="duplicate") from None
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return Reservation(key=key, usd=usd, tokens=tokens)

    def settle(
        self,
        key: str,
        *,
        cost_usd: float,
        tokens: int,
        answer: dict[str, Any],
        limits: Limits | None = None,
    ) -> BudgetExceeded | None:
        """Record the answer and its real cost, dropping the reservation, in one
        transaction that checks ``limits`` again with the real cost. When the real cost
        passes one (the provider counted more than was reserved, concurrent calls), the
        call is recorded ``failed`` with that ``BudgetExceeded`` (and its cost: it was
        spent), which is returned: the answer must be withheld."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute(
                "SELECT run_id, day, reserved_usd, reserved_tokens FROM calls WHERE key = ?",
                (key,),
            ).fetchone()
            refused: BudgetExceeded | None = None
            if row is not None and limits is not None:
                run_id, day, held_usd, held_tokens = row
                run_usd, run_tokens = db.execute(_RUN_SPENT, (run_id,)).fetchone()
                (day_usd,) = db.execute(_DAY_SPENT, (day,)).fetchone()
                try:
                    _check("run_usd", limits.run_usd, run_usd - held_usd, cost_usd, run_id)
                    _check("day_usd", limits.day_usd, day_usd - held_usd, cost_usd, run_id)
                    _check(
                        "run_tokens", limits.run_tokens, run_tokens - held_tokens, tokens, run_id
                    )
                except BudgetExceeded as err:
                    refused = BudgetExceeded(
                        f"{err.message} (by the answer's real cost: it is withheld)",
                        **{**err.attrs, "settled": True},
                    )
            status = "done" if refused is None else "failed"
            # secrets nowhere: the ledger keeps the answer as the run's journal does
            # (a replay of the key answers what the run journaled: the same text)
            stored = redact(answer) if refused is None else _error_record(refused)
            db.execute(
                "UPDATE calls SET status = ?, cost_usd = ?, tokens = ?, reserved_usd = 0, "
                "reserved_tokens = 0, answer = ?, updated_at = ? WHERE key = ?",
                (status, cost_usd, tokens, json.dumps(stored), time.time(), key),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return refused

    def fail(self, key: str, error: dict[str, Any], *, cost_usd: float, tokens: int) -> None:
        """Record an error that is an answer (the same request gets it again), with what
        the provider charged for it (an unusable reply still costs its tokens)."""
        self._db.execute(
            "UPDATE calls SET status = 'failed', cost_usd = ?, tokens = ?, reserved_usd = 0, "
            "reserved_tokens = 0, answer = ?, updated_at = ? WHERE key = ?",
            (cost_usd, tokens, json.dumps(redact(error)), time.time(), key),
        )

    def release(self, key: str) -> None:
        """Forget a reservation whose outcome is unknown (timeout, outage)."""
        self._db.execute("DELETE FROM calls WHERE key = ? AND status = 'reserved'", (key,))

    def spent(self, *, run_id: str | None = None, day: str | None = None) -> dict[str, float]:
        """Settled and reserved USD and tokens, for a run, a day, or everything; ``lost_*``
        what lost requests were charged (counted in the budgets too), ``provider_requests``
        how many requests went to a provider."""
        where, args = "", tuple[str, ...]()
        if run_id is not None:
            where, args = "WHERE run_id = ?", (run_id,)
        elif day is not None:
            where, args = "WHERE day = ?", (day,)
        row = self._db.execute(
            "SELECT COALESCE(SUM(cost_usd), 0), COALESCE(SUM(reserved_usd), 0), "
            "COALESCE(SUM(tokens), 0), COALESCE(SUM(reserved_tokens), 0), "
            f"COUNT(*) FROM calls {where}",
            args,
        ).fetchone()
        lost = self._db.execute(
            "SELECT COALESCE(SUM(CASE WHEN status = 'lost' THEN cost_usd END), 0), "
            "COALESCE(SUM(CASE WHEN status = 'lost' THEN tokens END), 0), COUNT(*) "
            f"FROM requests {where}",
            args,
        ).fetchone()
        return {
            "cost_usd": row[0],
            "reserved_usd": row[1],
            "tokens": row[2],
            "reserved_tokens": row[3],
            "calls": row[4],
            "lost_usd": lost[0],
            "lost_tokens": lost[1],
            "provider_requests": lost[2],
        }


def _error_record(err: BudgetExceeded) -> dict[str, Any]:
    attrs = {k: v for k, v in err.attrs.items() if isinstance(v, str | int | float | bool)}
    return {"type": type(err).__name__, "message": err.message, "attrs": attrs}


def _check(limit: str, maximum: float | None, used: float, more: float, run_id: str) -> None:
    if maximum is None:
        return
    total = used + more
    if total > maximum + _EPSILON:
        unit = "tokens" if limit == "run_tokens" else "USD"
        raise BudgetExceeded(
            f"the gateway's {limit} limit ({maximum:g} {unit}) would be passed: "
            f"{used:g} used or reserved, this call reserves {more:g} "
            f"(max_tokens x price); raise the limit in the gateway's config",
            limit=f"gateway.{limit}",
            maximum=maximum,
            observed=round(total, 6),
            run_id=run_id,
        )
