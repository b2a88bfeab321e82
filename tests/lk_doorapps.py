"""An app for the value door's tests (tests/door/test_value_door.py): the gate app of
``lk_testapps`` with one free parameter ``v`` that any JSON value may fill."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lk_testapps import GatePlanner, step
from loopkernel import App, AppParts


def _build(params: Mapping[str, Any]) -> AppParts:
    return AppParts(planner=GatePlanner(), workers={"step": step})


gate_v = App(
    name="lk_doorapps:gate_v",
    description="a run that waits for a human, with a free parameter v",
    build=_build,
    defaults={"v": None},
)
