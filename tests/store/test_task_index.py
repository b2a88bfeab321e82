"""The web inspector's task page reads one task's events through an index on
``events (run_id, task_id)``, and each task's start is recorded (``tasks.started_at``)
when its latest attempt goes running: on both stores, outside the state digest."""

from __future__ import annotations

from lk_stores import Backend
from loopkernel import BasePlanner, Event, GraphPatch, Kernel, Snapshot, TaskContext, TaskSpec
from loopkernel.ids import RunId
from loopkernel.store import Store
from loopkernel.store._inspect import TASK_EVENTS


class Two(BasePlanner):
    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return (
            GraphPatch()
            .add(TaskSpec(task_id="a", skill="work"))
            .add(TaskSpec(task_id="b", skill="work"))
            .connect("a", "b")
        )

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        if event.task_id == "b":
            return GraphPatch().finish("succeeded", None)
        return GraphPatch()


async def work(ctx: TaskContext) -> str:
    return ctx.task_id


def test_the_task_page_query_uses_an_index_on_run_and_task(backend: Backend) -> None:
    if backend.kind == "sqlite":
        backend.run(lambda store: store.checkpoint())  # created and migrated
        query = TASK_EVENTS.replace("?", "'r'", 2).replace("?", "'t'")
        detail = " ".join(str(row[-1]) for row in backend.sql("EXPLAIN QUERY PLAN " + query))
        assert "COVERING INDEX events_by_task (run_id=? AND task_id=?)" in detail, detail
        assert "PRIMARY KEY (run_id=? AND seq=?)" in detail, detail  # not the whole journal
        assert "TEMP B-TREE" not in detail
    else:
        backend.run(lambda store: store.checkpoint())
        found = backend.sql(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'events_by_task' "
            "AND schemaname = current_schema()"
        )
        assert found == [
            (
                "CREATE INDEX events_by_task ON "
                f"{_schema(backend)}.events USING btree (run_id, task_id, seq)",
            )
        ]


def _schema(backend: Backend) -> str:
    return str(backend.sql("SELECT current_schema()")[0][0])


def test_each_task_records_when_it_started_outside_the_digest(backend: Backend) -> None:
    async def body(store: Store) -> tuple[dict[str, tuple[float | None, float | None]], str]:
        kernel = Kernel(store, Two(), {"work": work})
        started = await kernel.start(app="two", run_id="two")
        await kernel.run(started.run_id)
        times = await store.task_times(RunId("two"))  # type: ignore[attr-defined]
        dump = await store.dump(RunId("two"))
        return times, str(dump)

    times, dump = backend.run(body)
    assert set(times) == {"a", "b"}
    # within the clocks' precision: SQLite's 'now' has milliseconds, and the journal's time
    # of a step is taken as the step's transaction begins
    slack = 0.01
    for started, finished in times.values():
        assert started is not None and finished is not None and started <= finished + slack
    a_done, b_start = times["a"][1], times["b"][0]
    assert a_done is not None and b_start is not None and a_done <= b_start + slack
    assert "started_at" not in dump and f"{times['a'][0]}" not in dump
