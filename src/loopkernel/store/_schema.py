"""The schema, named once: every table, what a run owns of it, and the migrations.

Export, fork, dump and delete derive from ``TABLES``; a test (``tests/store``) fails when
a table is created that ``TABLES`` does not name, or that export, fork or delete ignore.
The two dialects' migrations create the same tables, keys and columns; where PostgreSQL
differs and why:

- JSON columns are ``json``, not ``jsonb``: ``json`` keeps the exact text it was given,
  so the canonical text ``dumps`` wrote is the text ``loads`` reads back (``jsonb`` would
  turn ``1e+16`` into an integer, drop ``-0.0``'s sign and refuse ``\\u0000``), and a dump
  digests byte-identically to SQLite's. Cast to ``jsonb`` in a query when you need to.
- Identifier columns use ``COLLATE "C"``: byte order, as SQLite's ``BINARY``, so that
  ``ORDER BY task_id`` (and the dump) does not depend on the server's locale.
- Integers are ``bigint`` (SQLite's INTEGER is 64-bit), times ``double precision``
  (seconds since the epoch, as ``RunInfo`` carries them).
- PostgreSQL's version 7 is its own: ``loopkernel_commit_step``, the executor's step as
  one statement (one round trip; ``PostgresStore.commit_step``). So the same change is
  SQLite's migration 7 and PostgreSQL's 8.

A released migration is frozen: a change is a new one, so that databases already at the
old version get it. A database newer than this code is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "COMMIT_STEP",
    "DATABASE_TABLES",
    "LEASE_LOST",
    "NO_RUN",
    "POSTGRES_MIGRATIONS",
    "POSTGRES_VERSION",
    "SQLITE_MIGRATIONS",
    "SQLITE_VERSION",
    "TABLES",
    "Table",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Table:
    """One table of a run's rows."""

    name: str
    fork: str
    """What ``fork_run`` writes of it: ``copied`` (the source's prefix), ``derived``
    (computed from the journal as of the fork's event), ``new`` (a row of the fork's own),
    or why it writes nothing."""
    digest: bool = False
    """Whether the canonical dump (the state digest) reads it."""


TABLES: tuple[Table, ...] = (
    Table(name="runs", fork="new", digest=True),
    Table(name="tasks", fork="derived", digest=True),
    Table(name="edges", fork="derived", digest=True),
    Table(name="events", fork="copied"),
    Table(name="patches", fork="copied"),
    Table(name="approvals", fork="copied"),
    Table(name="effects", fork="copied", digest=True),
    Table(name="forks", fork="new"),
    Table(
        name="evidence",
        fork="none: a fork records its own evidence as its tasks run (docs/fork.md)",
    ),
)
"""Every table whose rows belong to one run, by its ``run_id`` column (``DATABASE_TABLES``
are the database's). Export keeps, delete removes, each table's rows of one run."""

DATABASE_TABLES: tuple[str, ...] = ("meta", "schedules")
"""Tables of the whole database, not of a run: the schema version, the schedules."""

LEASE_LOST = "LK001"
"""SQLSTATE of ``loopkernel_commit_step`` when a fenced step's lease epoch is not the run's;
the detail is ``{"epoch": ..., "owner": ...}`` as JSON."""
NO_RUN = "LK002"
"""SQLSTATE of ``loopkernel_commit_step`` when there is no such run."""

_SQLITE_STARTED = (
    "UPDATE tasks SET started_at = (julianday('now') - 2440587.5) * 86400.0 "
    "WHERE run_id = NEW.run_id AND task_id = NEW.task_id"
)
"""Migration 11's trigger body: the task's start, in seconds since the epoch."""

SQLITE_MIGRATIONS: list[list[str]] = [
    # 1: the journal, the materialized graph, approvals and effects.
    [
        """CREATE TABLE runs (
            run_id      TEXT PRIMARY KEY,
            app         TEXT NOT NULL,
            params      TEXT NOT NULL,
            status      TEXT NOT NULL,
            verdict     TEXT,
            max_events  INTEGER NOT NULL,
            token_hash  TEXT NOT NULL,
            created_at  REAL NOT NULL,
            updated_at  REAL NOT NULL
        )""",
        """CREATE TABLE tasks (
            run_id          TEXT NOT NULL,
            task_id         TEXT NOT NULL,
            skill           TEXT NOT NULL,
            input           TEXT NOT NULL,
            evidence_scope  TEXT NOT NULL,
            state           TEXT NOT NULL,
            result          TEXT NOT NULL,
            error           TEXT NOT NULL,
            attempts        INTEGER NOT NULL,
            wait_reason     TEXT,
            human_input     TEXT NOT NULL,
            wait_epoch      INTEGER NOT NULL,
            done_seq        INTEGER,
            PRIMARY KEY (run_id, task_id)
        ) WITHOUT ROWID""",
        """CREATE TABLE edges (
            run_id  TEXT NOT NULL,
            src     TEXT NOT NULL,
            dst     TEXT NOT NULL,
            PRIMARY KEY (run_id, src, dst)
        ) WITHOUT ROWID""",
        """CREATE TABLE events (
            run_id      TEXT NOT NULL,
            seq         INTEGER NOT NULL,
            kind        TEXT NOT NULL,
            task_id     TEXT,
            data        TEXT NOT NULL,
            created_at  REAL NOT NULL,
            PRIMARY KEY (run_id, seq)
        ) WITHOUT ROWID""",
        """CREATE TABLE patches (
            run_id      TEXT NOT NULL,
            event_seq   INTEGER NOT NULL,
            ops         TEXT NOT NULL,
            outcome     TEXT NOT NULL,
            reason      TEXT,
            planner     TEXT NOT NULL,
            created_at  REAL NOT NULL,
            PRIMARY KEY (run_id, event_seq)
        ) WITHOUT ROWID""",
        """CREATE TABLE approvals (
            run_id      TEXT NOT NULL,
            task_id     TEXT NOT NULL,
            wait_epoch  INTEGER NOT NULL,
            decision    TEXT NOT NULL,
            event_seq   INTEGER NOT NULL,
            PRIMARY KEY (run_id, task_id, wait_epoch)
        ) WITHOUT ROWID""",
        """CREATE TABLE effects (
            run_id      TEXT NOT NULL,
            idem_key    TEXT NOT NULL,
            task_id     TEXT NOT NULL,
            call_index  INTEGER NOT NULL,
            tool        TEXT NOT NULL,
            effect      TEXT NOT NULL,
            arguments   TEXT NOT NULL,
            status      TEXT NOT NULL,
            result      TEXT NOT NULL,
            error       TEXT NOT NULL,
            created_at  REAL NOT NULL,
            updated_at  REAL NOT NULL,
            PRIMARY KEY (run_id, idem_key)
        ) WITHOUT ROWID""",
    ],
    # 2: leases for workers (docs/workers.md). lease_until NULL: not enqueued, no lease.
    [
        "ALTER TABLE runs ADD COLUMN owner TEXT",
        "ALTER TABLE runs ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN lease_until REAL",
        "CREATE INDEX runs_claimable ON runs (created_at) "
        "WHERE status = 'running' AND lease_until IS NOT NULL",
    ],
    # 3: forks (docs/fork.md): the run and event a run was forked from.
    [
        """CREATE TABLE forks (
            run_id      TEXT PRIMARY KEY,
            source_run  TEXT NOT NULL,
            source_seq  INTEGER NOT NULL,
            created_at  REAL NOT NULL
        ) WITHOUT ROWID""",
    ],
    # 4: the run's trace context (docs/observability.md): a W3C traceparent, or NULL.
    ["ALTER TABLE runs ADD COLUMN trace TEXT"],
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
        "ALTER TABLE patches ADD COLUMN proposal TEXT",
        """CREATE TABLE evidence (
            run_id            TEXT NOT NULL,
            n                 INTEGER NOT NULL,
            ev_key            TEXT NOT NULL,
            kind              TEXT NOT NULL,
            content           TEXT NOT NULL,
            source_kind       TEXT NOT NULL,
            source_uri        TEXT NOT NULL,
            source_task_id    TEXT,
            source_event_seq  INTEGER,
            truncated         INTEGER NOT NULL,
            note              TEXT,
            sha256            TEXT NOT NULL,
            chars             INTEGER NOT NULL,
            created_at        REAL NOT NULL,
            PRIMARY KEY (run_id, n),
            UNIQUE (run_id, ev_key)
        ) WITHOUT ROWID""",
    ],
    # 7: the digest of a tool call's raw arguments, beside its effect (docs/tools.md).
    ["ALTER TABLE effects ADD COLUMN arguments_digest TEXT"],
    # 8: timers (docs/operations.md, "Timers, schedules and versions"): a waiting task's
    # wake-up time, and the run's earliest one, which workers look for.
    [
        "ALTER TABLE tasks ADD COLUMN wake_at REAL",
        "ALTER TABLE runs ADD COLUMN wake_at REAL",
        "CREATE INDEX runs_due ON runs (wake_at) WHERE status = 'waiting' AND wake_at IS NOT NULL",
    ],
    # 9: versions (docs/operations.md): the app version that started the run, and the one
    # whose executor journaled each patch.
    [
        "ALTER TABLE runs ADD COLUMN app_version TEXT",
        "ALTER TABLE patches ADD COLUMN app_version TEXT",
    ],
    # 10: schedules (docs/operations.md): cron expressions that workers start runs from.
    [
        """CREATE TABLE schedules (
            name        TEXT PRIMARY KEY,
            cron        TEXT NOT NULL,
            app         TEXT NOT NULL,
            params      TEXT NOT NULL,
            next_due    REAL NOT NULL,
            last_run    TEXT,
            created_at  REAL NOT NULL
        ) WITHOUT ROWID""",
    ],
    # 11: the web inspector's task page reads one task's events by the database (docs/web.md),
    # and a task's start: when its latest attempt went running, set by the database itself
    # whichever statement writes the state (NULL for a task that started before this
    # version). Neither is in the state digest (the dump names its columns).
    [
        "CREATE INDEX events_by_task ON events (run_id, task_id, seq)",
        "ALTER TABLE tasks ADD COLUMN started_at REAL",
        f"""CREATE TRIGGER tasks_started_insert AFTER INSERT ON tasks
        WHEN NEW.state = 'running'
        BEGIN {_SQLITE_STARTED}; END""",
        f"""CREATE TRIGGER tasks_started_update AFTER UPDATE OF state ON tasks
        WHEN NEW.state = 'running' AND OLD.state <> 'running'
        BEGIN {_SQLITE_STARTED}; END""",
    ],
]

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


def _with_wake(text: str) -> str:
    """Migration 7's step function, replaced, writing the tasks' ``wake_at`` too: derived
    from the frozen text by exact substitutions, each of which must apply once."""
    for old, new in (
        ("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"),
        (
            "wait_reason, human_input, wait_epoch, done_seq)",
            "wait_reason, human_input, wait_epoch, done_seq, wake_at)",
        ),
        ("ELSE x.done END\n", "ELSE x.done END, x.wake\n"),
        (
            "wait_epoch bigint, done bigint)",
            "wait_epoch bigint, done bigint, wake double precision)",
        ),
        (
            "done_seq = excluded.done_seq;",
            "done_seq = excluded.done_seq, wake_at = excluded.wake_at;",
        ),
    ):
        if text.count(old) != 1:
            raise AssertionError(f"step function: {old!r} is not in it once")
        text = text.replace(old, new)
    return text


COMMIT_STEP_WAKE = _with_wake(COMMIT_STEP)
"""Migration 9's text (PostgreSQL): the step function that also writes ``wake_at``."""


def _with_version(text: str) -> str:
    """Migration 9's step function, replaced again, writing the patches' ``app_version``."""
    for old, new in (
        (
            "proposal,\n                             created_at)",
            "proposal, app_version,\n                             created_at)",
        ),
        ("x.proposal::json, p_now", "x.proposal::json, x.version, p_now"),
        ("planner text, proposal text)", "planner text, proposal text, version text)"),
    ):
        if text.count(old) != 1:
            raise AssertionError(f"step function: {old!r} is not in it once")
        text = text.replace(old, new)
    return text


COMMIT_STEP_VERSION = _with_version(COMMIT_STEP_WAKE)
"""Migration 10's text (PostgreSQL): the step function that also writes ``app_version``."""

POSTGRES_MIGRATIONS: list[list[str]] = [
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
    # 8: the digest of a tool call's raw arguments, beside its effect (docs/tools.md).
    ["ALTER TABLE effects ADD COLUMN arguments_digest text"],
    # 9: timers, as SQLite's 8; the step function writes the task's wake_at too.
    [
        "ALTER TABLE tasks ADD COLUMN wake_at double precision",
        "ALTER TABLE runs ADD COLUMN wake_at double precision",
        "CREATE INDEX runs_due ON runs (wake_at) WHERE status = 'waiting' AND wake_at IS NOT NULL",
        COMMIT_STEP_WAKE,
    ],
    # 10: versions, as SQLite's 9; the step function writes the patches' app_version too.
    [
        "ALTER TABLE runs ADD COLUMN app_version text",
        "ALTER TABLE patches ADD COLUMN app_version text",
        COMMIT_STEP_VERSION,
    ],
    # 11: schedules, as SQLite's 10.
    [
        """CREATE TABLE schedules (
            name        text COLLATE "C" PRIMARY KEY,
            cron        text NOT NULL,
            app         text NOT NULL,
            params      json NOT NULL,
            next_due    double precision NOT NULL,
            last_run    text COLLATE "C",
            created_at  double precision NOT NULL
        )""",
    ],
    # 12: the task page's index and the tasks' start, as SQLite's 11 (the server's clock).
    [
        "CREATE INDEX events_by_task ON events (run_id, task_id, seq)",
        "ALTER TABLE tasks ADD COLUMN started_at double precision",
        """CREATE FUNCTION loopkernel_task_started() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.started_at := extract(epoch FROM clock_timestamp())::double precision;
    RETURN NEW;
END
$fn$""",
        # BEFORE: the row is written once, with its start; WHEN: no call for other rows
        "CREATE TRIGGER tasks_started_insert BEFORE INSERT ON tasks FOR EACH ROW "
        "WHEN (NEW.state = 'running') EXECUTE FUNCTION loopkernel_task_started()",
        "CREATE TRIGGER tasks_started_update BEFORE UPDATE OF state ON tasks FOR EACH ROW "
        "WHEN (NEW.state = 'running' AND OLD.state <> 'running') "
        "EXECUTE FUNCTION loopkernel_task_started()",
    ],
]

SQLITE_VERSION = len(SQLITE_MIGRATIONS)
POSTGRES_VERSION = len(POSTGRES_MIGRATIONS)
