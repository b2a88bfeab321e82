"""The one effect journal (``loopkernel._effects``) on both stores: arguments stored
redacted, replays compared by the digest of the raw arguments, rows from before digests
compared as they always were, and a model call journaled like a tool call."""

from __future__ import annotations

import hashlib
import json

import pytest

from lk_stores import Backend
from loopkernel._effects import Call, EffectJournal, Plan, arguments_digest
from loopkernel.errors import ReplayDivergence
from loopkernel.evidence import marker
from loopkernel.executor import TaskContext
from loopkernel.graph import JSON, GraphState, Task
from loopkernel.ids import RunId, TaskId
from loopkernel.store import EffectRecord, NewRun, Store

RUN, TASK = RunId("r"), TaskId("t")
PASSWORD = "s3cr3t-Pa55word"


def ctx() -> TaskContext:
    state = GraphState(
        run_id=RUN, app="test", params=None, tasks={TASK: Task(task_id=TASK, skill="w")}
    )
    return TaskContext(state=state, task_id=TASK, attempt=1, upto_seq=0)


class Sender:
    """A ``send`` that answers with what it was sent, and counts."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def plan(self, args: dict[str, JSON], *, keep: tuple[str, ...] = ()) -> Plan[JSON]:
        async def send(key: str) -> JSON:
            self.sent.append(key)
            return {"got": args}

        return Plan(
            effect="idempotent",
            send=send,
            settle=lambda v: (v, v),
            answer=lambda err: None,
            keep_arguments=keep,
        )


async def call(store: Store, sender: Sender, args: dict[str, JSON], **kw: object) -> JSON:
    journal = EffectJournal(store, points=("tool_sent", "tool_returned"), span="tool")
    c = Call(run_id=RUN, task_id=TASK, call_index=0, key="r/t/0", tool="login", arguments=args)

    async def prepare(prior: EffectRecord | None) -> Plan[JSON]:
        return sender.plan(args, **kw)  # type: ignore[arg-type]

    def revive_error(error: JSON) -> BaseException:
        return RuntimeError(json.dumps(error))

    return await journal.call(
        ctx(), c, prepare=prepare, revive=lambda v: v, revive_error=revive_error
    )


async def new_run(store: Store) -> None:
    await store.create_run(
        NewRun(run_id=RUN, app="test", params=None, max_events=100, token_hash="")
    )


def test_arguments_are_stored_redacted_and_replays_compared_by_their_digest(
    backend: Backend,
) -> None:
    args: dict[str, JSON] = {"user": "ada", "dsn": f"postgres://ada:x@db?password={PASSWORD}"}

    async def body(store: Store) -> None:
        await new_run(store)
        sender = Sender()
        assert await call(store, sender, args) == {"got": args}
        (row,) = await store.effects(RUN)
        assert row.arguments == {
            "user": "ada",
            "dsn": f"postgres://ada:x@db?password={marker(PASSWORD)}",
        }
        canonical = json.dumps(args, sort_keys=True, separators=(",", ":"))
        assert row.arguments_digest == hashlib.sha256(canonical.encode()).hexdigest()
        assert row.arguments_digest == arguments_digest(args)
        assert await call(store, sender, args) == {"got": args}  # replayed: same digest
        assert sender.sent == ["r/t/0"]
        other = {**args, "dsn": "postgres://ada:x@db?password=another-pass"}
        with pytest.raises(ReplayDivergence, match="does not make the same tool calls"):
            await call(store, sender, other)

    backend.run(body)


def test_a_tool_opts_arguments_out_of_redaction(backend: Backend) -> None:
    args: dict[str, JSON] = {"token": "tok-visible-123", "password": PASSWORD}

    async def body(store: Store) -> None:
        await new_run(store)
        await call(store, Sender(), args, keep=("token",))
        (row,) = await store.effects(RUN)
        assert row.arguments == {"token": "tok-visible-123", "password": marker(PASSWORD)}

    backend.run(body)


def test_a_row_from_before_digests_is_compared_by_its_arguments(backend: Backend) -> None:
    args: dict[str, JSON] = {"user": "ada"}

    async def body(store: Store) -> None:
        await new_run(store)
        old = EffectRecord(
            run_id=RUN, key="r/t/0", task_id=TASK, call_index=0, tool="login",
            effect="idempotent", arguments=args, status="intended",
        )  # fmt: skip
        assert (await store.intend_effect(old)).arguments_digest is None
        sender = Sender()
        assert await call(store, sender, args) == {"got": args}  # in flight: re-sent, same key
        assert sender.sent == ["r/t/0"]
        with pytest.raises(ReplayDivergence):
            await call(store, sender, {"user": "bob"})

    backend.run(body)
