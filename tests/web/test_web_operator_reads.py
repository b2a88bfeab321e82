"""What an operator reads first on a run page: its input (the app's parameters) and its
whole history, downloadable as JSON (the same as ``loopkernel inspect --journal
--json``)."""

from __future__ import annotations

import json
import subprocess

from lk_helpers import LOOPKERNEL, cli_env
from lk_web import Served, make_run


def test_the_run_page_shows_its_input(server: Served) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast")
    with server.client() as http:
        page = http.get(f"/runs/{run_id}").text
        params = page.split('id="run-params">', 1)[1].split("</dd>", 1)[0]
        assert "scenario" in params and "fast" in params


def test_the_history_downloads_as_json_like_the_cli_prints_it(server: Served) -> None:
    run_id, _ = make_run(server.db, "speculation", "fast")
    with server.client() as http:
        assert f'href="/runs/{run_id}/history.json" download' in http.get(f"/runs/{run_id}").text
        got = http.get(f"/runs/{run_id}/history.json")
        assert got.status_code == 200
        assert got.headers["content-type"].startswith("application/json")
        assert got.headers["content-disposition"] == (
            f'attachment; filename="{run_id}.history.json"'
        )
        history = got.json()
        assert http.get("/runs/no-such-run/history.json").status_code == 404
    cli = subprocess.run(
        [*LOOPKERNEL, "--db", server.db, "inspect", run_id, "--journal", "--json"],
        env=cli_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    printed = json.loads(cli.stdout)
    assert history["digest"] == printed["digest"] and history["status"] == "succeeded"
    assert history["journal"] == printed["journal"] and history["patches"] == printed["patches"]
    assert [e["seq"] for e in history["journal"]] == list(range(1, history["last_seq"] + 1))
