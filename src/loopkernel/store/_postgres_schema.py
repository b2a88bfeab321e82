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
- Version 7 is PostgreSQL's alone: ``loopkernel_commit_step``, the executor's step as one
  statement (one round trip; ``PostgresStore.commit_step``). SQLite stays at 6.
"""

from __future__ import annotations

from typing import Any

import psycopg

from loopkernel.errors import SchemaTooNew

__all__ = [
    "COMMIT_STEP",
    "LEASE_LOST",
    "MIGRATIONS",
    "MIGRATION_LOCK",
    "NO_RUN",
    "SCHEMA_VERSION",
    "migrate",
]

MIGRATION_LOCK = 0x4C4B_5343_4845_4D41
"""The advisory lock key migrations run under (``LKSCHEMA`` in ASCII), per database."""

LEASE_LOST = "LK001"
"""SQLSTATE of ``loopkernel_commit_step`` when a fenced step's lease epoch is not the run's;
the detail is ``{"epoch": ..., "owner": ...}`` as JSON."""
NO_RUN = "LK002"
"""SQLSTATE of ``loopkernel_commit_step`` when there is no such run."""

# Migration 7's text: as every migration, frozen once released. A later change to the step
# is a new migration (CREATE OR REPLACE FUNCTION), so that databases already at 7 get it.
COMMIT_STEP = f"""CREATE FUNCTION loopkernel_commit_step(
    p_run text, p_epoch bigint, p_now double precision, p_step jsonb
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
-- PostgresStore.commit_step in one statement. p_step holds the step's rows:
--   {{"events": [{{"seq", "kind", "task", "data"}}], "patches": [{{"seq", "ops", "outcome",
--   "reason", "planner", "proposal"}}], "tasks": [{{"id", ...the tasks columns}}],
--   "edges": [{{"src", "dst"}}], "finish": {{"status", "verdict"}} or null,
--   "final": {{"kind", "task", "data"}} or null}}
-- JSON column values arrive as JSON strings holding the canonical text the store
-- encoded (jsonb keeps a string's characters), and the json columns keep that text byte
-- for byte. Returns the run's last seq before the step's events: they are written at
-- top + 1, top + 2, ..., and the final event after them.
DECLARE
    v_events jsonb := p_step -> 'events';
    v_n integer := jsonb_array_length(p_step -> 'events');
    v_finish jsonb := p_step -> 'finish';
    v_final jsonb := p_step -> 'final';
    v_epoch bigint;
    v_owner text;
    v_top bigint;
    v_planned bigint[];
    v_moved boolean := false;
BEGIN
    SELECT lease_epoch, owner INTO v_epoch, v_owner FROM runs WHERE run_id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run %', p_run USING ERRCODE = '{NO_RUN}';
    END IF;
    IF p_epoch IS NOT NULL AND v_epoch IS DISTINCT FROM p_epoch THEN
        RAISE EXCEPTION 'run %: lease epoch % is over', p_run, p_epoch USING
            ERRCODE = '{LEASE_LOST}',
            DETAIL = json_build_object('epoch', v_epoch, 'owner', v_owner)::text;
    END IF;
    -- A statement of its own, after the lock: in a volatile function each statement takes
    -- a fresh snapshot (READ COMMITTED), so it sees what the lock's previous holder wrote.
    SELECT COALESCE(MAX(seq), 0) INTO v_top FROM events WHERE run_id = p_run;
    IF v_n > 0 THEN
        INSERT INTO events (run_id, seq, kind, task_id, data, created_at)
        SELECT p_run, v_top + x.i, x.kind, x.task, x.data::json, p_now
        FROM ROWS FROM (jsonb_to_recordset(v_events)
                        AS (seq bigint, kind text, task text, data text))
            WITH ORDINALITY AS x(seq, kind, task, data, i);
        -- Another process appended after the executor's view: the seqs it gave its events
        -- move to those written, in the records and the tasks too (_codec.rebase_step).
        v_moved := (v_events -> 0 ->> 'seq')::bigint <> v_top + 1;
        IF v_moved THEN
            v_planned := ARRAY(SELECT (u.e ->> 'seq')::bigint
                               FROM jsonb_array_elements(v_events) WITH ORDINALITY AS u(e, i)
                               ORDER BY u.i);
        END IF;
    END IF;
    IF jsonb_array_length(p_step -> 'patches') > 0 THEN
        INSERT INTO patches (run_id, event_seq, ops, outcome, reason, planner, proposal,
                             created_at)
        SELECT p_run,
               CASE WHEN v_moved THEN COALESCE(v_top + array_position(v_planned, x.seq), x.seq)
                    ELSE x.seq END,
               x.ops::json, x.outcome, x.reason, x.planner, x.proposal::json, p_now
        FROM jsonb_to_recordset(p_step -> 'patches') AS x(seq bigint, ops text, outcome text,
            reason text, planner text, proposal text);
    END IF;
    IF jsonb_array_length(p_step -> 'tasks') > 0 THEN
        INSERT INTO tasks (run_id, task_id, skill, input, evidence_scope, state, result, error,
                           attempts, wait_reason, human_input, wait_epoch, done_seq)
        SELECT p_run, x.id, x.skill, x.input::json, x.scope, x.state, x.result::json,
               x.error::json, x.attempts, x.wait_reason, x.human::json, x.wait_epoch,
               CASE WHEN v_moved THEN COALESCE(v_top + array_position(v_planned, x.done), x.done)
                    ELSE x.done END
        FROM jsonb_to_recordset(p_step -> 'tasks') AS x(id text, skill text, input text,
            scope text, state text, result text, error text, attempts bigint,
            wait_reason text, human text, wait_epoch bigint, done bigint)
        ON CONFLICT (run_id, task_id) DO UPDATE SET state = excluded.state,
            result = excluded.result, error = excluded.error, attempts = excluded.attempts,
            wait_reason = excluded.wait_reason, human_input = excluded.human_input,
            wait_epoch = excluded.wait_epoch, done_seq = excluded.done_seq;
    END IF;
    IF jsonb_array_length(p_step -> 'edges') > 0 THEN
        INSERT INTO edges (run_id, src, dst)
        SELECT p_run, x.src, x.dst
        FROM jsonb_to_recordset(p_step -> 'edges') AS x(src text, dst text);
    END IF;
    IF jsonb_typeof(v_finish) = 'object' THEN
        UPDATE runs SET status = v_finish ->> 'status',
            verdict = (v_finish ->> 'verdict')::json, updated_at = p_now
        WHERE run_id = p_run;
        IF jsonb_typeof(v_final) = 'object' THEN
            INSERT INTO events (run_id, seq, kind, task_id, data, created_at)
            VALUES (p_run, v_top + v_n + 1, v_final ->> 'kind', v_final ->> 'task',
                    (v_final ->> 'data')::json, p_now);
            v_n := v_n + 1;
        END IF;
    END IF;
    IF v_n > 0 THEN
        -- Watchers of the journal (the web inspector) hear of it when this commits.
        PERFORM pg_notify('loopkernel_journal', p_run);
    END IF;
    RETURN v_top;
END
$fn$"""

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
    # 7: a durable step in one statement (docs/postgres.md, "A step in one round trip").
    [COMMIT_STEP],
    # 8: the sha256 of a call's raw arguments (docs/durability.md, "Secrets"): arguments
    # are stored redacted, a replay is compared by this digest. NULL in older rows.
    ["ALTER TABLE effects ADD COLUMN arguments_digest text"],
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
