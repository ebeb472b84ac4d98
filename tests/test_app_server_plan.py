"""The window's model load plans for the local server's batch context while the server is on
(LoadSpec.server_parallel: Serving.parallel sequences of the slot context), and not while it is off."""
from __future__ import annotations

import pytest

from app.bridge.generation_runner import SharedEngine
from app.bridge.load_runner import LoadJob, LoadRunner
from app.bridge.server_host import Serving
from engine.errors import HearthError
from engine.sizing.load_spec import LoadSpec
from engine.serve.http.server import LocalServer


@pytest.mark.parametrize("serving, planned", [(None, 0), (3, 3)])
def test_the_load_plans_the_servers_batch_only_while_it_serves(monkeypatch, bundled_path, serving, planned):
    seen: list[LoadSpec] = []

    def load_model(req, **_kw):
        seen.append(req)
        raise HearthError("stopped here: the test needs only the request")

    monkeypatch.setattr("app.bridge.load_runner.load_model", load_model)
    shared = SharedEngine()
    if serving is not None:
        shared.serving = Serving(LocalServer(port=0), parallel=serving)  # never started: nothing listens
    worker = LoadRunner(shared)
    failures: list[str] = []
    worker.failed.connect(lambda _id, msg: failures.append(msg))
    worker.load(LoadJob(LoadSpec(model=str(bundled_path))))
    assert [r.server_parallel for r in seen] == [planned]
    assert failures == ["stopped here: the test needs only the request"]
