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
    "SQLITE_TEXT_TABLES",
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

DATABASE_TABLES: tuple[str, ...] = (
    "meta",
    "schedules",
    "kb_passages",
    "kb_identifiers",
    "schedule_events",
)
"""Tables of the whole database, not of a run: the schema version, the schedules, the
knowledge base's passages and their exact identifiers (``store/_kb.py``)."""

SQLITE_TEXT_TABLES: tuple[str, ...] = tuple(
    "kb_text" + suffix for suffix in ("", "_data", "_idx", "_content", "_docsize", "_config")
)
"""SQLite's full-text index of the passages (FTS5) and the tables FTS5 keeps it in;
PostgreSQL indexes a ``tsvector`` column of ``kb_passages`` instead."""

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


def _replaced(text: str, *changes: tuple[str, str]) -> str:
    """``text`` with each ``(old, new)`` substituted: exact, and each must apply once."""
    for old, new in changes:
        if text.count(old) != 1:
            raise AssertionError(f"step function: {old!r} is not in it once")
        text = text.replace(old, new)
    return text


COMMIT_STEP_WAKE = _replaced(
    COMMIT_STEP,
    ("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"),
    (
        "wait_reason, human_input, wait_epoch, done_seq)",
        "wait_reason, human_input, wait_epoch, done_seq, wake_at)",
    ),
    ("ELSE x.done END\n", "ELSE x.done END, x.wake\n"),
    ("wait_epoch bigint, done bigint)", "wait_epoch bigint, done bigint, wake double precision)"),
    ("done_seq = excluded.done_seq;", "done_seq = excluded.done_seq, wake_at = excluded.wake_at;"),
)
"""Migration 9's text (PostgreSQL): migration 7's step function, replaced, writing the
tasks' ``wake_at`` too (derived from the frozen text)."""

COMMIT_STEP_VERSION = _replaced(
    COMMIT_STEP_WAKE,
    (
        "proposal,\n                             created_at)",
        "proposal, app_version,\n                             created_at)",
    ),
    ("x.proposal::json, p_now", "x.proposal::json, x.version, p_now"),
    ("planner text, proposal text)", "planner text, proposal text, version text)"),
)
"""Migration 10's text (PostgreSQL): the step function that also writes ``app_version``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Dialect:
    """How a database spells the schema (the module docstring says why they differ)."""

    postgres: bool
    id: str
    """Identifiers: ordered byte by byte."""
    text: str
    json: str
    int: str
    real: str
    bool: str
    rowid: str
    """After a table's closing parenthesis (SQLite keys every table but ``runs`` by its
    primary key: ``WITHOUT ROWID``)."""


_SQLITE = _Dialect(
    postgres=False,
    id="TEXT",
    text="TEXT",
    json="TEXT",
    int="INTEGER",
    real="REAL",
    bool="INTEGER",
    rowid=" WITHOUT ROWID",
)
_POSTGRES = _Dialect(
    postgres=True,
    id='text COLLATE "C"',
    text="text",
    json="json",
    int="bigint",
    real="double precision",
    bool="boolean",
    rowid="",
)

_SQLITE_STARTED = (
    "UPDATE tasks SET started_at = (julianday('now') - 2440587.5) * 86400.0 "
    "WHERE run_id = NEW.run_id AND task_id = NEW.task_id"
)
"""SQLite's migration 11 trigger body: the task's start, in seconds since the epoch."""

_SQLITE_STARTED_TRIGGERS = [
    f"""CREATE TRIGGER tasks_started_insert AFTER INSERT ON tasks
        WHEN NEW.state = 'running'
        BEGIN {_SQLITE_STARTED}; END""",
    f"""CREATE TRIGGER tasks_started_update AFTER UPDATE OF state ON tasks
        WHEN NEW.state = 'running' AND OLD.state <> 'running'
        BEGIN {_SQLITE_STARTED}; END""",
]
_POSTGRES_STARTED = [
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
]
"""Migration 11's triggers that set a task's ``started_at``."""


def _migrations(t: _Dialect) -> list[list[str]]:
    """The migrations of one database, numbered as SQLite's: PostgreSQL's 7 is its own
    (``COMMIT_STEP``), so from there on its number is one more."""
    pg = t.postgres
    migrations = [
        # 1: the journal, the materialized graph, approvals and effects.
        [
            f"""CREATE TABLE runs (
            run_id      {t.id} PRIMARY KEY,
            app         {t.text} NOT NULL,
            params      {t.json} NOT NULL,
            status      {t.text} NOT NULL,
            verdict     {t.json},
            max_events  {t.int} NOT NULL,
            token_hash  {t.text} NOT NULL,
            created_at  {t.real} NOT NULL,
            updated_at  {t.real} NOT NULL
        )""",
            *(["CREATE INDEX runs_created_at ON runs (created_at DESC)"] if pg else []),
            f"""CREATE TABLE tasks (
            run_id          {t.id} NOT NULL,
            task_id         {t.id} NOT NULL,
            skill           {t.text} NOT NULL,
            input           {t.json} NOT NULL,
            evidence_scope  {t.text} NOT NULL,
            state           {t.text} NOT NULL,
            result          {t.json} NOT NULL,
            error           {t.json} NOT NULL,
            attempts        {t.int} NOT NULL,
            wait_reason     {t.text},
            human_input     {t.json} NOT NULL,
            wait_epoch      {t.int} NOT NULL,
            done_seq        {t.int},
            PRIMARY KEY (run_id, task_id)
        ){t.rowid}""",
            f"""CREATE TABLE edges (
            run_id  {t.id} NOT NULL,
            src     {t.id} NOT NULL,
            dst     {t.id} NOT NULL,
            PRIMARY KEY (run_id, src, dst)
        ){t.rowid}""",
            f"""CREATE TABLE events (
            run_id      {t.id} NOT NULL,
            seq         {t.int} NOT NULL,
            kind        {t.text} NOT NULL,
            task_id     {t.id},
            data        {t.json} NOT NULL,
            created_at  {t.real} NOT NULL,
            PRIMARY KEY (run_id, seq)
        ){t.rowid}""",
            f"""CREATE TABLE patches (
            run_id      {t.id} NOT NULL,
            event_seq   {t.int} NOT NULL,
            ops         {t.json} NOT NULL,
            outcome     {t.text} NOT NULL,
            reason      {t.text},
            planner     {t.text} NOT NULL,
            created_at  {t.real} NOT NULL,
            PRIMARY KEY (run_id, event_seq)
        ){t.rowid}""",
            f"""CREATE TABLE approvals (
            run_id      {t.id} NOT NULL,
            task_id     {t.id} NOT NULL,
            wait_epoch  {t.int} NOT NULL,
            decision    {t.text} NOT NULL,
            event_seq   {t.int} NOT NULL,
            PRIMARY KEY (run_id, task_id, wait_epoch)
        ){t.rowid}""",
            f"""CREATE TABLE effects (
            run_id      {t.id} NOT NULL,
            idem_key    {t.id} NOT NULL,
            task_id     {t.id} NOT NULL,
            call_index  {t.int} NOT NULL,
            tool        {t.text} NOT NULL,
            effect      {t.text} NOT NULL,
            arguments   {t.json} NOT NULL,
            status      {t.text} NOT NULL,
            result      {t.json} NOT NULL,
            error       {t.json} NOT NULL,
            created_at  {t.real} NOT NULL,
            updated_at  {t.real} NOT NULL,
            PRIMARY KEY (run_id, idem_key)
        ){t.rowid}""",
        ],
        # 2: leases for workers (docs/workers.md). lease_until NULL: not enqueued, no lease;
        # PostgreSQL's times are the server's clock, in seconds since the epoch.
        [
            f"ALTER TABLE runs ADD COLUMN owner {t.text}",
            f"ALTER TABLE runs ADD COLUMN lease_epoch {t.int} NOT NULL DEFAULT 0",
            f"ALTER TABLE runs ADD COLUMN lease_until {t.real}",
            "CREATE INDEX runs_claimable ON runs (created_at) "
            "WHERE status = 'running' AND lease_until IS NOT NULL",
        ],
        # 3: forks (docs/fork.md): the run and event a run was forked from.
        [
            f"""CREATE TABLE forks (
            run_id      {t.id} PRIMARY KEY,
            source_run  {t.id} NOT NULL,
            source_seq  {t.int} NOT NULL,
            created_at  {t.real} NOT NULL
        ){t.rowid}""",
        ],
        # 4: the run's trace context (docs/observability.md): a W3C traceparent, or NULL.
        [f"ALTER TABLE runs ADD COLUMN trace {t.text}"],
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
            f"ALTER TABLE patches ADD COLUMN proposal {t.json}",
            f"""CREATE TABLE evidence (
            run_id            {t.id} NOT NULL,
            n                 {t.int} NOT NULL,
            ev_key            {t.id} NOT NULL,
            kind              {t.text} NOT NULL,
            content           {t.text} NOT NULL,
            source_kind       {t.text} NOT NULL,
            source_uri        {t.text} NOT NULL,
            source_task_id    {t.id},
            source_event_seq  {t.int},
            truncated         {t.bool} NOT NULL,
            note              {t.text},
            sha256            {t.text} NOT NULL,
            chars             {t.int} NOT NULL,
            created_at        {t.real} NOT NULL,
            PRIMARY KEY (run_id, n),
            UNIQUE (run_id, ev_key)
        ){t.rowid}""",
        ],
        # 7: the digest of a tool call's raw arguments, beside its effect (docs/tools.md).
        [f"ALTER TABLE effects ADD COLUMN arguments_digest {t.text}"],
        # 8: timers (docs/operations.md, "Timers, schedules and versions"): a waiting task's
        # wake-up time, and the run's earliest one, which workers look for. PostgreSQL's
        # step function writes the task's wake_at too.
        [
            f"ALTER TABLE tasks ADD COLUMN wake_at {t.real}",
            f"ALTER TABLE runs ADD COLUMN wake_at {t.real}",
            "CREATE INDEX runs_due ON runs (wake_at) "
            "WHERE status = 'waiting' AND wake_at IS NOT NULL",
            *([COMMIT_STEP_WAKE] if pg else []),
        ],
        # 9: versions (docs/operations.md): the app version that started the run, and the one
        # whose executor journaled each patch (PostgreSQL's step function writes it too).
        [
            f"ALTER TABLE runs ADD COLUMN app_version {t.text}",
            f"ALTER TABLE patches ADD COLUMN app_version {t.text}",
            *([COMMIT_STEP_VERSION] if pg else []),
        ],
        # 10: schedules (docs/operations.md): cron expressions that workers start runs from.
        [
            f"""CREATE TABLE schedules (
            name        {t.id} PRIMARY KEY,
            cron        {t.text} NOT NULL,
            app         {t.text} NOT NULL,
            params      {t.json} NOT NULL,
            next_due    {t.real} NOT NULL,
            last_run    {t.id},
            created_at  {t.real} NOT NULL
        ){t.rowid}""",
        ],
        # 11: the web inspector's task page reads one task's events by the database
        # (docs/web.md), and a task's start: when its latest attempt went running, set by
        # the database itself whichever statement writes the state (NULL for a task that
        # started before this version; PostgreSQL: the server's clock). Neither is in the
        # state digest (the dump names its columns).
        [
            "CREATE INDEX events_by_task ON events (run_id, task_id, seq)",
            f"ALTER TABLE tasks ADD COLUMN started_at {t.real}",
            *(_POSTGRES_STARTED if pg else _SQLITE_STARTED_TRIGGERS),
        ],
    ]
    if pg:
        # 7 (PostgreSQL): a durable step in one statement (docs/postgres.md, "A step in one
        # round trip").
        migrations.insert(6, [COMMIT_STEP])
    return migrations


def _knowledge(t: _Dialect) -> list[str]:
    """12 (PostgreSQL's 13): the knowledge base (docs/sre.md, "Runbooks and knowledge"):
    passages of Markdown files, split by heading, a full-text index (SQLite FTS5 with the
    Porter stemmer; PostgreSQL an English ``tsvector``, the heading weighted above the body)
    and the exact identifiers each passage names. Not a run's: export keeps them whole."""
    if t.postgres:
        key = "passage_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
        words = ",\n        words tsvector GENERATED ALWAYS AS (setweight(to_tsvector('english', "
        words += "heading), 'A') || to_tsvector('english', body)) STORED"
        index = ["CREATE INDEX kb_passages_words ON kb_passages USING gin (words)"]
    else:
        key, words = "passage_id INTEGER PRIMARY KEY", ""
        index = ["CREATE VIRTUAL TABLE kb_text USING fts5(heading, body, tokenize='porter')"]
    return [
        f"""CREATE TABLE kb_passages (
        {key},
        file        {t.text} NOT NULL,
        heading     {t.text} NOT NULL,
        body        {t.text} NOT NULL,
        added_at    {t.real} NOT NULL{words}
    )""",
        "CREATE INDEX kb_passages_by_file ON kb_passages (file)",
        f"""CREATE TABLE kb_identifiers (
        ident       {t.id} NOT NULL,
        passage_id  {t.int} NOT NULL,
        PRIMARY KEY (ident, passage_id)
    ){t.rowid}""",
        *index,
    ]


def _schedule_policies(t: _Dialect) -> list[str]:
    """13 (PostgreSQL's 14): schedules with policies (docs/operations.md, "Schedules"): the
    policy (overlap, catch-up window, jitter, time zone, scenario), the decided state
    (starts to make, the buffer, cancels, requests from trigger and backfill, counts), a
    pause, the revision every change is a compare-and-set on, whether something decided is
    not done yet (``busy``: workers look at it before its due time), and the schedule's own
    journal (one row per decision, keyed by the revision that made it)."""
    return [
        f"ALTER TABLE schedules ADD COLUMN policy {t.json} NOT NULL DEFAULT '{{}}'",
        f"ALTER TABLE schedules ADD COLUMN state {t.json} NOT NULL DEFAULT '{{}}'",
        f"ALTER TABLE schedules ADD COLUMN paused {t.text}",
        f"ALTER TABLE schedules ADD COLUMN rev {t.int} NOT NULL DEFAULT 0",
        f"ALTER TABLE schedules ADD COLUMN busy {t.bool} NOT NULL "
        f"DEFAULT {'false' if t.postgres else '0'}",
        f"""CREATE TABLE schedule_events (
        name        {t.id} NOT NULL,
        rev         {t.int} NOT NULL,
        n           {t.int} NOT NULL,
        at          {t.real} NOT NULL,
        kind        {t.text} NOT NULL,
        run_id      {t.id},
        detail      {t.text} NOT NULL,
        PRIMARY KEY (name, rev, n)
    ){t.rowid}""",
    ]


SQLITE_MIGRATIONS: list[list[str]] = [
    *_migrations(_SQLITE),
    _knowledge(_SQLITE),
    _schedule_policies(_SQLITE),
]
POSTGRES_MIGRATIONS: list[list[str]] = [
    *_migrations(_POSTGRES),
    _knowledge(_POSTGRES),
    _schedule_policies(_POSTGRES),
]
SQLITE_VERSION = len(SQLITE_MIGRATIONS)
POSTGRES_VERSION = len(POSTGRES_MIGRATIONS)
