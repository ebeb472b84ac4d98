"""The Hub browser's Qt-free part against the local Hub (tests/hub_server.py): search, a
repository's files, the planner's fit from headers read with Range requests before any
download, the listed sha256 being checked, a cancelled download's partial file, and offline."""
from __future__ import annotations

import threading

import pytest

from engine.models import hub
from engine.library import hub_search
from engine.library import local as lib
from engine.sizing.hardware import simulated
from hub_server import HubServer, Sparse
from model_files import gguf_bytes_header

HW8 = simulated("8GiB", "16GiB", cores=8)


def sparse(arch: str, quant: str, **kw) -> Sparse:
    head, size = gguf_bytes_header(arch, f"{arch}-{quant}", quant, **kw)
    return Sparse(head, size)


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    from tiny_hf import make_tiny_model

    d = make_tiny_model(tmp_path_factory.mktemp("hubsrc") / "m")
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}


@pytest.fixture
def server(tiny_files, monkeypatch, tmp_path):
    big_vocab = [f"token-{i}" for i in range(151936)]  # a header of ~2.4 MB: more than the first MiB
    repos = {
        "acme/Qwen-7B-GGUF": {"qwen-7b-Q4_K_M.gguf": sparse("qwen2.5-7b", "Q4_K_M", tokens=big_vocab),
                              "qwen-7b-F16-00001-of-00002.gguf": sparse("qwen2.5-7b", "F16", shard=(0, 2)),
                              "qwen-7b-F16-00002-of-00002.gguf": sparse("qwen2.5-7b", "F16", shard=(1, 2)),
                              "mmproj-qwen-F16.gguf": b"m" * 2000, "README.md": b"# hi\n"},
        "acme/Qwen-14B-GGUF": {"q14-F16.gguf": sparse("qwen2.5-14b", "F16")},
        "acme/tiny": dict(tiny_files),
        "acme/text-only": {"README.md": b"nothing"},
    }
    cards = {"acme/Qwen-7B-GGUF": {"tags": ["gguf"], "downloads": 50},
             "acme/Qwen-14B-GGUF": {"tags": ["gguf"], "downloads": 900},
             "acme/tiny": {"tags": ["transformers", "safetensors"], "library_name": "transformers"}}
    srv = HubServer(repos, cards)
    monkeypatch.setenv("HF_ENDPOINT", srv.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HEARTH_MODEL_DIR", str(tmp_path / "models"))
    yield srv
    srv.close()


def test_search_filters_gguf_and_transformers_models_most_downloaded_first(server):
    assert [m.repo_id for m in hub_search.search("qwen", "gguf")] == ["acme/Qwen-14B-GGUF", "acme/Qwen-7B-GGUF"]
    assert [m.repo_id for m in hub_search.search("", "transformers")] == ["acme/tiny"]
    assert hub_search.search("nothing-like-this", "gguf") == []


def test_repo_files_group_split_files_with_sizes_and_sha256(server):
    ggufs, hf = hub_search.repo_files("acme/Qwen-7B-GGUF")
    assert [f.name for f in ggufs] == ["qwen-7b-F16-00001-of-00002.gguf", "qwen-7b-Q4_K_M.gguf"]
    split = ggufs[0]
    assert len(split.parts) == 2
    repo = server.repos["acme/Qwen-7B-GGUF"]
    assert split.size == sum(len(repo[p]) for p in split.parts)
    assert split.sha256[split.parts[0]] == server.etag("acme/Qwen-7B-GGUF", split.parts[0])[0]
    assert hf == []
    _, hf = hub_search.repo_files("acme/tiny")
    assert len(hf) == 1 and hf[0].parts == ["model.safetensors"]
    with pytest.raises(hub_search.HubError, match="no model 'acme/missing'"):
        hub_search.repo_files("acme/missing")


def test_fit_badges_come_from_headers_read_with_range_requests(server):
    ggufs, _ = hub_search.repo_files("acme/Qwen-7B-GGUF")
    q4 = next(f for f in ggufs if f.name == "qwen-7b-Q4_K_M.gguf")
    badge, summary, spec = hub_search.fit("acme/Qwen-7B-GGUF", q4, HW8)
    assert badge == lib.FIT_GPU and spec.quant == "Q4_K_M" and spec.n_layers == 28
    # The repository's projector is not a GGUF: the model still gets its badge, the projector
    # counted by its size (it is downloaded with the model, and refused when it loads).
    assert q4.projector == "mmproj-qwen-F16.gguf" and spec.vision_bytes == 2000
    # The header is bigger than the first MiB: the read grows, and never fetches the weights.
    assert server.gets("qwen-7b-Q4_K_M.gguf") == ["bytes=0-1048575", "bytes=0-4194303"]
    split = next(f for f in ggufs if len(f.parts) == 2)
    badge, _, spec = hub_search.fit("acme/Qwen-7B-GGUF", split, HW8)
    assert badge == lib.FIT_OFFLOAD and spec.quant == "F16"
    (f14,), _ = hub_search.repo_files("acme/Qwen-14B-GGUF")
    assert hub_search.fit("acme/Qwen-14B-GGUF", f14, HW8)[0] == lib.FIT_NO
    assert hub_search.fit("acme/Qwen-14B-GGUF", f14, simulated("none", "64GiB", cores=8))[0] == lib.FIT_CPU
    _, (weights,) = hub_search.repo_files("acme/tiny")
    badge, _, spec = hub_search.fit("acme/tiny", weights, HW8, kind="transformers")
    assert badge == lib.FIT_GPU and spec.format == "hf"


def test_a_wrong_listed_sha256_is_caught_and_a_cancelled_partial_can_be_discarded(server, tmp_path):
    tiny = server.repos["acme/tiny"]
    server.lie_sha.add("model.safetensors")
    with pytest.raises(hub.HubError, match="SHA-256 mismatch"):
        hub.download("acme/tiny")
    server.lie_sha.clear()
    server.throttle = 0.002
    cancel = threading.Event()
    seen = []

    def progress(done, total, name):
        if name == "model.safetensors":
            seen.append(done)
            if done > seen[0]:
                cancel.set()

    with pytest.raises(hub.DownloadCancelled):
        hub.download("acme/tiny", progress=progress, cancel=cancel)
    tag = server.etag("acme/tiny", "model.safetensors")[0]
    freed = hub.discard_partial("acme/tiny", [tag])
    assert 0 < freed < len(tiny["model.safetensors"])
    assert not list((tmp_path / "hfcache").rglob("*.incomplete"))
    server.throttle = 0.0
    snap = hub.download("acme/tiny")
    assert (snap / "model.safetensors").read_bytes() == tiny["model.safetensors"]
    assert server.gets("model.safetensors")[-1] is None   # started over: nothing left to resume


def test_offline_says_so(server, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(hub_search.HubOffline, match="offline mode is on"):
        hub_search.search("qwen")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    server.down = True
    with pytest.raises(hub_search.HubOffline, match="you seem to be offline"):
        hub_search.search("qwen")
    with pytest.raises(hub_search.HubOffline):
        hub_search.repo_files("acme/tiny")
