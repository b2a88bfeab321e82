"""``hold_lease``: one lifetime of a run's lease, written once for every executor.

``Client.execute`` (a ``loopkernel run``/``resume`` process) and ``RunWorker`` (a claimed
run) hold a lease the same way::

    async with hold_lease(store, claim, lease_s=...):
        outcome = await client.run_owned(run_id)     # the body

While the body runs, a heartbeat renews the lease every third of ``lease_s``. If the
store answers that the lease moved on (``LeaseLost``: another executor took the run over),
the body is cancelled and ``LeaseLost`` leaves the block instead of the cancellation: the
body wrote nothing after it, since fencing refuses its writes. A heartbeat the store did
not answer (``StoreUnavailable``) is told to ``on_fault`` and tried again at the next beat:
the body's own writes fail the same way, and if the lease runs out meanwhile fencing
refuses whatever comes after.

``acquire_here`` is how ``Client.execute`` takes the lease in the first place (taken over at
once from a holder that died on this machine; ``HELD`` is what this process executes now).

The heartbeat is one task owned by the block: started on entry, cancelled and awaited on
exit, whatever the body did. It is not under an ``asyncio.TaskGroup`` because the body is
the caller's own task (a TaskGroup around a ``yield`` would wrap the body's errors in an
``ExceptionGroup``); the ownership is the same.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from loopkernel.errors import LeaseLost, RunHeld, StoreUnavailable
from loopkernel.ids import RunId
from loopkernel.store import Claim, Leases, Store
from loopkernel.store._lease import Holder

__all__ = ["HELD", "acquire_here", "hold_lease"]

HELD: set[tuple[str, RunId]] = set()
"""Runs this process executes now (``(store url, run)``): its own lease is never taken
over from inside it."""


async def acquire_here(store: Store, rid: RunId, lease_s: float) -> Claim:
    """The run's lease for this process (``Client.execute``), taken over at once from a
    holder that died on this machine; ``RunHeld`` from a live one."""
    try:
        return await store.acquire(rid, Holder.here(), lease_s)
    except RunHeld as held:
        holder = Holder.parse(str(held.attrs.get("holder") or ""))
        if holder is None:
            raise
        # Our own pid: a lease this process failed to release (the store was down) and
        # that none of its executors holds any more.
        here = Holder.here()
        mine = (holder.host, holder.pid) == (here.host, here.pid)
        mine = mine and (store.url, rid) not in HELD
        if not (mine or holder.is_dead_here()):
            raise
        takeover = int(held.attrs["epoch"])
        return await store.acquire(rid, Holder.here(), lease_s, takeover=takeover)


@contextlib.asynccontextmanager
async def hold_lease(
    store: Leases,
    claim: Claim,
    *,
    lease_s: float,
    on_fault: Callable[[StoreUnavailable], None] | None = None,
) -> AsyncIterator[None]:
    """Hold ``claim``'s lease while the block runs; ``LeaseLost`` if it is taken over."""
    body = asyncio.current_task()
    assert body is not None, "hold_lease runs inside a task"
    lost: list[LeaseLost] = []

    async def beat() -> None:
        while True:
            await asyncio.sleep(lease_s / 3)
            try:
                await store.heartbeat(claim.run_id, claim.epoch, lease_s)
            except LeaseLost as exc:
                lost.append(exc)
                body.cancel()
                return
            except StoreUnavailable as exc:
                if on_fault is not None:
                    on_fault(exc)

    heart = asyncio.create_task(beat(), name=f"heartbeat {claim.run_id}")
    try:
        yield
    except asyncio.CancelledError:
        if lost and body.uncancel() == 0:  # our cancellation, nobody else's: say why
            raise lost[0] from None
        raise
    finally:
        heart.cancel()
        await asyncio.wait([heart])
