"""SQLite schema, as numbered migrations. A database newer than this code is refused."""

from __future__ import annotations

MIGRATIONS: list[list[str]] = [
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
    # 7: the sha256 of a call's raw arguments (docs/durability.md, "Secrets"): arguments
    # are stored redacted, a replay is compared by this digest. NULL in older rows.
    ["ALTER TABLE effects ADD COLUMN arguments_digest TEXT"],
]

SCHEMA_VERSION = len(MIGRATIONS)
