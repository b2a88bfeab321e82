"""PostgreSQL schema, as numbered migrations; the same tables and keys as SQLite's.

Differences from ``_sqlite_schema`` and why:

- JSON columns are ``json``, not ``jsonb``: ``json`` keeps the exact text it was given,
  so the canonical text ``dumps`` wrote is the text ``loads`` reads back (``jsonb`` would
  turn ``1e+16`` into an integer, drop ``-0.0``'s sign and refuse ``\\u0000``), and a dump
  digests byte-identically to SQLite's. Cast to ``jsonb`` in a query when you need to.
- Identifier columns use ``COLLATE "C"``: byte order, as SQLite's ``BINARY``, so that
  ``ORDER BY task_id`` (and the dump) does not depend on the server's locale.
- Integers are ``bigint`` (SQLite's INTEGER is 64-bit), times ``double precision``
  (seconds since the epoch, as ``RunInfo`` carries them).
"""

from __future__ import annotations

from typing import Any

import psycopg

from loopkernel.errors import SchemaTooNew

__all__ = ["MIGRATIONS", "MIGRATION_LOCK", "SCHEMA_VERSION", "migrate"]

MIGRATION_LOCK = 0x4C4B_5343_4845_4D41
"""The advisory lock key migrations run under (``LKSCHEMA`` in ASCII), per database."""

MIGRATIONS: list[list[str]] = [
    # 1: the journal, the materialized graph, approvals and effects.
    [
        """CREATE TABLE runs (
            run_id      text COLLATE "C" PRIMARY KEY,
            app         text NOT NULL,
            params      json NOT NULL,
            status      text NOT NULL,
            verdict     json,
            max_events  bigint NOT NULL,
            token_hash  text NOT NULL,
            created_at  double precision NOT NULL,
            updated_at  double precision NOT NULL
        )""",
        "CREATE INDEX runs_created_at ON runs (created_at DESC)",
        """CREATE TABLE tasks (
            run_id          text COLLATE "C" NOT NULL,
            task_id         text COLLATE "C" NOT NULL,
            skill           text NOT NULL,
            input           json NOT NULL,
            evidence_scope  text NOT NULL,
            state           text NOT NULL,
            result          json NOT NULL,
            error           json NOT NULL,
            attempts        bigint NOT NULL,
            wait_reason     text,
            human_input     json NOT NULL,
            wait_epoch      bigint NOT NULL,
            done_seq        bigint,
            PRIMARY KEY (run_id, task_id)
        )""",
        """CREATE TABLE edges (
            run_id  text COLLATE "C" NOT NULL,
            src     text COLLATE "C" NOT NULL,
            dst     text COLLATE "C" NOT NULL,
            PRIMARY KEY (run_id, src, dst)
        )""",
        """CREATE TABLE events (
            run_id      text COLLATE "C" NOT NULL,
            seq         bigint NOT NULL,
            kind        text NOT NULL,
            task_id     text COLLATE "C",
            data        json NOT NULL,
            created_at  double precision NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
        """CREATE TABLE patches (
            run_id      text COLLATE "C" NOT NULL,
            event_seq   bigint NOT NULL,
            ops         json NOT NULL,
            outcome     text NOT NULL,
            reason      text,
            planner     text NOT NULL,
            created_at  double precision NOT NULL,
            PRIMARY KEY (run_id, event_seq)
        )""",
        """CREATE TABLE approvals (
            run_id      text COLLATE "C" NOT NULL,
            task_id     text COLLATE "C" NOT NULL,
            wait_epoch  bigint NOT NULL,
            decision    text NOT NULL,
            event_seq   bigint NOT NULL,
            PRIMARY KEY (run_id, task_id, wait_epoch)
        )""",
        """CREATE TABLE effects (
            run_id      text COLLATE "C" NOT NULL,
            idem_key    text COLLATE "C" NOT NULL,
            task_id     text COLLATE "C" NOT NULL,
            call_index  bigint NOT NULL,
            tool        text NOT NULL,
            effect      text NOT NULL,
            arguments   json NOT NULL,
            status      text NOT NULL,
            result      json NOT NULL,
            error       json NOT NULL,
            created_at  double precision NOT NULL,
            updated_at  double precision NOT NULL,
            PRIMARY KEY (run_id, idem_key)
        )""",
    ],
    # 2: leases for workers (docs/workers.md). lease_until NULL: not enqueued, no lease;
    # times are the server's clock, in seconds since the epoch.
    [
        "ALTER TABLE runs ADD COLUMN owner text",
        "ALTER TABLE runs ADD COLUMN lease_epoch bigint NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN lease_until double precision",
        "CREATE INDEX runs_claimable ON runs (created_at) "
        "WHERE status = 'running' AND lease_until IS NOT NULL",
    ],
    # 3: forks (docs/fork.md): the run and event a run was forked from.
    [
        """CREATE TABLE forks (
            run_id      text COLLATE "C" PRIMARY KEY,
            source_run  text COLLATE "C" NOT NULL,
            source_seq  bigint NOT NULL,
            created_at  double precision NOT NULL
        )""",
    ],
    # 4: the run's trace context (docs/observability.md): a W3C traceparent, or NULL.
    ["ALTER TABLE runs ADD COLUMN trace text"],
    # 5: keyset pagination of the run list (the web inspector), newest first, by status
    # or by app.
    [
        "CREATE INDEX runs_by_created ON runs (created_at, run_id)",
        "CREATE INDEX runs_by_status ON runs (status, created_at, run_id)",
        "CREATE INDEX runs_by_app ON runs (app, created_at, run_id)",
    ],
    # 6: models and evidence (docs/models.md, docs/evidence.md): a proposing planner's
    # proposal beside the applied patch; typed evidence, E<n> in journal order.
    [
        "ALTER TABLE patches ADD COLUMN proposal json",
        """CREATE TABLE evidence (
            run_id            text COLLATE "C" NOT NULL,
            n                 bigint NOT NULL,
            ev_key            text COLLATE "C" NOT NULL,
            kind              text NOT NULL,
            content           text NOT NULL,
            source_kind       text NOT NULL,
            source_uri        text NOT NULL,
            source_task_id    text COLLATE "C",
            source_event_seq  bigint,
            truncated         boolean NOT NULL,
            note              text,
            sha256            text NOT NULL,
            chars             bigint NOT NULL,
            created_at        double precision NOT NULL,
            PRIMARY KEY (run_id, n),
            UNIQUE (run_id, ev_key)
        )""",
    ],
]

SCHEMA_VERSION = len(MIGRATIONS)


async def migrate(conn: psycopg.AsyncConnection[Any], where: str) -> None:
    """Bring the schema ``conn`` sees (its ``search_path``) to ``SCHEMA_VERSION``.

    Under a transaction-scoped advisory lock: processes starting at once take turns, and
    the later ones find the schema current. DDL is transactional in PostgreSQL, so a
    migration that fails leaves the previous version whole. A newer schema is refused.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text NOT NULL)"
        )
        cur = await conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
        row = await cur.fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"{where} has schema version {version}; this LoopKernel knows up to "
                f"{SCHEMA_VERSION}. Upgrade loopkernel to open it.",
                found=version,
                known=SCHEMA_VERSION,
            )
        for statements in MIGRATIONS[version:]:
            for sql in statements:
                await conn.execute(sql)
        if version < SCHEMA_VERSION:
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
