"""The model library's Qt-free core: what is on disk, read from headers; the fit badge on
simulated machines; delete, import, drafts and the remembered state."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.library import hf_cache
from engine.library import local as lib
from engine.sizing.hardware import simulated
from model_files import write_model_gguf

COMMIT = "0123456789abcdef0123456789abcdef01234567"
HW8 = simulated("8GiB", "16GiB", cores=8)


def tokens(variant: int = 0) -> list[str]:
    t = [f"t{i}" for i in range(300)]
    if variant:
        t[5] = "other"
    return t


def hf_cache_gguf(cache: Path, repo: str, name: str, **kw) -> Path:
    """A GGUF in the standard Hugging Face cache layout (blob, snapshot link, ref)."""
    d = cache / ("models--" + repo.replace("/", "--"))
    blob = write_model_gguf(d / "blobs" / "b" / "x.gguf", **kw)
    blob = blob.rename(d / "blobs" / ("%064x" % abs(hash(name))))
    (d / "blobs" / "b").rmdir()
    snap = d / "snapshots" / COMMIT / name
    snap.parent.mkdir(parents=True)
    snap.symlink_to(os.path.relpath(blob, snap.parent))
    (d / "refs").mkdir()
    (d / "refs" / "main").write_text(COMMIT)
    return snap


@pytest.fixture(autouse=True)
def models_dir(tmp_path, monkeypatch):
    """The planner looks for drafts in Hearth's models folder: never the user's real one."""
    monkeypatch.setenv("HEARTH_MODEL_DIR", str(tmp_path / "models"))
    return tmp_path / "models"


@pytest.fixture
def library(tmp_path, models_dir):
    models = models_dir
    write_model_gguf(models / "qwen7.gguf", "qwen2.5-7b", "Q4_K_M")
    added = tmp_path / "added"
    write_model_gguf(added / "big.gguf", "qwen2.5-14b", "F16")
    cache = tmp_path / "hf"
    hf_cache_gguf(cache, "acme/tiny-GGUF", "tiny.Q8_0.gguf", arch="qwen2.5-0.5b", quant="Q8_0")
    li = lib.Library(tmp_path / "library.json", models_folder=models, hf_cache=cache)
    li.add_folder(added)
    return li


def test_scan_lists_every_source_with_figures_from_the_headers(library, bundled_path, tmp_path):
    with open(library.models_folder / "qwen7.gguf", "rb") as f:  # a header cut short
        (library.models_folder / "renamed-Q2_K.gguf").write_bytes(f.read(64))
    ms = {m.path.name: m for m in library.scan()}
    assert set(ms) == {bundled_path.name, "qwen7.gguf", "big.gguf", "tiny.Q8_0.gguf", "renamed-Q2_K.gguf"}
    b = ms[bundled_path.name]
    assert (b.origin, b.quant, b.architecture, b.deletable) == (lib.ORIGIN_BUNDLED, "Q4_1", "llama", False)
    q = ms["qwen7.gguf"]
    assert (q.origin, q.architecture, q.quant, q.n_ctx) == (lib.ORIGIN_MODELS, "qwen2", "Q4_K_M", 32768)
    assert 7.5e9 < q.n_params < 7.7e9 and q.size == (library.models_folder / "qwen7.gguf").stat().st_size
    assert ms["big.gguf"].origin == lib.ORIGIN_ADDED and ms["big.gguf"].quant == "F16"
    h = ms["tiny.Q8_0.gguf"]
    assert (h.origin, h.repo_id, h.quant) == (lib.ORIGIN_HF, "acme/tiny-GGUF", "Q8_0")
    # A damaged file is listed with its reason, and its name is never read as a quantization.
    bad = ms["renamed-Q2_K.gguf"]
    assert bad.error and bad.quant == ""


def test_fit_badges_on_a_simulated_8_gib_gpu(library):
    ms = {m.path.name: m for m in library.scan()}
    assert lib.fit_badge(ms["qwen7.gguf"], HW8)[0] == lib.FIT_GPU
    assert lib.fit_badge(ms["big.gguf"], HW8)[0] == lib.FIT_NO
    q14 = write_model_gguf(library.models_folder / "q14.gguf", "qwen2.5-14b", "Q4_K_M")
    badge, summary = lib.fit_badge(q14, HW8)
    assert badge == lib.FIT_OFFLOAD and "/48" in summary
    assert lib.fit_badge(ms["qwen7.gguf"], simulated("none", "16GiB", cores=8))[0] == lib.FIT_CPU


def test_delete_removes_files_and_the_bundled_model_cannot_be_deleted(library):
    ms = {m.path.name: m for m in library.scan()}
    bundled = next(m for m in ms.values() if m.origin == lib.ORIGIN_BUNDLED)
    with pytest.raises(lib.LibraryError, match="cannot be deleted"):
        library.delete(bundled)
    assert bundled.path.is_file()
    library.delete(ms["qwen7.gguf"])
    assert not (library.models_folder / "qwen7.gguf").exists()
    h = ms["tiny.Q8_0.gguf"]
    blob = h.path.resolve()
    library.delete(h)
    assert not h.path.exists() and not blob.exists()
    assert {m.path.name for m in library.scan()} == {bundled.path.name, "big.gguf"}


def test_import_links_or_copies_a_checked_gguf(library, tmp_path):
    src = write_model_gguf(tmp_path / "downloads" / "dropped.gguf", "qwen2.5-0.5b", "Q8_0")
    dest = library.import_gguf(src)
    assert dest == library.models_folder / "dropped.gguf" and os.path.samefile(dest, src)
    assert library.import_gguf(src) == dest           # dropping it twice adds it once
    other = write_model_gguf(tmp_path / "elsewhere" / "dropped.gguf", "qwen2.5-0.5b", "F16")
    assert library.import_gguf(other).name == "dropped-1.gguf"
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(lib.LibraryError, match="not a .gguf file"):
        library.import_gguf(tmp_path / "notes.txt")
    (tmp_path / "fake.gguf").write_bytes(b"not a model at all, just text")
    with pytest.raises(lib.HearthError, match="not a GGUF model file"):
        library.import_gguf(tmp_path / "fake.gguf")
    assert not (library.models_folder / "fake.gguf").exists()


def test_compatible_drafts_share_the_vocabulary_and_are_at_most_half_the_size(tmp_path, models_dir):
    models = models_dir
    target = write_model_gguf(models / "target.gguf", "qwen2.5-1.5b", "Q8_0", tokens=tokens())
    write_model_gguf(models / "draft-small.gguf", "qwen2.5-0.5b", "Q4_K_M", tokens=tokens())
    write_model_gguf(models / "draft-q8.gguf", "qwen2.5-0.5b", "Q8_0", tokens=tokens())
    write_model_gguf(models / "other-vocab.gguf", "qwen2.5-0.5b", "Q4_K_M", tokens=tokens(1))
    write_model_gguf(models / "too-big.gguf", "qwen2.5-1.5b", "Q4_K_M", tokens=tokens())
    li = lib.Library(tmp_path / "library.json", models_folder=models, hf_cache=tmp_path / "none")
    drafts = lib.compatible_drafts(target, li.scan())
    assert [m.path.name for m in drafts] == ["draft-small.gguf", "draft-q8.gguf"]


def test_state_remembers_recent_models_and_survives_a_damaged_file(library, tmp_path):
    a, b = library.models_folder / "qwen7.gguf", tmp_path / "added" / "big.gguf"
    library.mark_used(a)
    library.mark_used(b)
    again = lib.Library(tmp_path / "library.json", models_folder=library.models_folder, hf_cache=library.hf_cache)
    assert again.recent() == [str(b), str(a)]
    assert {m.path.name for m in again.scan()} >= {"big.gguf"}  # the added folder is remembered
    assert next(m for m in again.scan() if m.path == a).last_used is not None
    (tmp_path / "library.json").write_text("{broken")
    third = lib.Library(tmp_path / "library.json", models_folder=library.models_folder)
    assert third.state.folders == [] and "unreadable" in third.notice
    assert any(p.name.startswith("library.json.corrupt-") for p in tmp_path.iterdir())
    assert json.loads(json.dumps(third.state.last_used)) == {}


def test_an_auto_draft_that_will_not_load_leaves_ngram_and_says_why(models_dir, bundled_path):
    """The library lets any GGUF into the models folder; Auto must not fail the whole load on one."""
    from engine.engine import Engine
    from engine.config import EngineConfig
    from engine.models.gguf import model_info
    from gguf_writer import write_gguf

    info = model_info(bundled_path)
    models_dir.mkdir(parents=True, exist_ok=True)
    write_gguf(models_dir / "header-only.gguf",
               {"general.architecture": "llama", "llama.block_count": 1, "llama.embedding_length": 64,
                "llama.attention.head_count": 4, "llama.context_length": 512,
                "tokenizer.ggml.model": info.tokenizer_model, "tokenizer.ggml.tokens": info.tokens},
               [("token_embd.weight", (64, len(info.tokens)), 0)])
    eng = Engine.open(EngineConfig(bundled_path, n_ctx=512, n_threads=2, draft="auto", cache_budget=0))
    try:
        assert eng.draft is None and eng.spec_kind == "auto"
        assert any("header-only.gguf not used" in n for n in eng.spec_ctl.pending_notes)
    finally:
        eng.close()
    with pytest.raises(lib.HearthError, match="header-only.gguf"):  # chosen by name: the user hears at once
        Engine.open(EngineConfig(bundled_path, n_ctx=512, n_threads=2, draft=str(models_dir / "header-only.gguf"),
                    cache_budget=0))


def test_a_projector_is_known_by_its_header_and_shown_on_its_models_row(tiny_vlm, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "vision-model.gguf").symlink_to(tiny_vlm[0])
    (models / "eyes.gguf").symlink_to(tiny_vlm[1])  # nothing in the name says projector
    li = lib.Library(tmp_path / "library.json", models_folder=models, hf_cache=tmp_path / "none")
    rows = [m for m in li.scan() if m.origin == lib.ORIGIN_MODELS]
    assert [m.path.name for m in rows] == ["vision-model.gguf"]
    assert rows[0].projector == "eyes.gguf" and not rows[0].error
    imported = li.import_gguf(tiny_vlm[1])  # a projector dropped on the library joins its model's folder
    assert imported.parent == models and [m.path.name for m in li.scan() if m.origin == lib.ORIGIN_MODELS] == [
        "vision-model.gguf"]


def test_deleting_a_snapshot_takes_only_that_repository_s(tmp_path):
    # Two repositories at the same commit (as the tests' Hub serves them); one with a second, older snapshot.
    cache = tmp_path / "hf"
    a = hf_cache_gguf(cache, "acme/a-GGUF", "a.Q8_0.gguf", arch="qwen2.5-0.5b", quant="Q8_0")
    b = hf_cache_gguf(cache, "acme/b-GGUF", "b.Q8_0.gguf", arch="qwen2.5-0.5b", quant="Q8_0")
    old = b.parents[1] / ("f" * 40)
    old.mkdir()
    (old / "b.Q8_0.gguf").symlink_to(os.readlink(b))
    hf_cache.delete_cached(a.parent, cache, snapshot=True)
    assert not (cache / "models--acme--a-GGUF").exists() and b.is_file()
    hf_cache.delete_cached(b.parent, cache, snapshot=True)  # the other snapshot keeps the blob; refs/main goes
    assert (old / "b.Q8_0.gguf").is_file() and not b.parent.exists()
    assert not (cache / "models--acme--b-GGUF" / "refs" / "main").exists()
    with pytest.raises(lib.LibraryError, match="not a snapshot"):
        hf_cache.delete_cached(tmp_path, cache, snapshot=True)
