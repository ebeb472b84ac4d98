"""GGUF metadata and the clear errors for bad model files."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import ModelFileError
from engine.models.gguf import model_info, read_gguf
from gguf_writer import write_gguf


def test_bundled_model_metadata(bundled_path):
    info = model_info(bundled_path)
    # Values published for SmolLM2-135M: 30 layers, 576 wide, 9 heads, 3 KV heads (GQA).
    assert info.architecture == "llama"
    assert (info.n_layers, info.n_embd, info.n_heads, info.n_kv_heads, info.head_dim) == (30, 576, 9, 3, 64)
    assert info.n_ctx_train == 8192
    assert info.n_vocab == 49152 == len(info.tokens)
    assert info.file_type == "Q4_1"
    assert info.tensor_types["Q4_1"] > info.tensor_types.get("F32", 0) / 2
    assert "<|im_start|>" in info.chat_template
    assert info.special_tokens["eos"] == "<|im_end|>"
    assert info.weight_bytes < info.file_size < info.weight_bytes + 8 * 1024 * 1024
    assert sum(info.layer_bytes) + info.other_bytes == info.weight_bytes
    # GQA-aware KV size: 2 x layers x kv_heads x head_dim x 2 bytes (f16)
    assert info.kv_bytes_per_token(2.0) == 2 * 30 * 3 * 64 * 2


def test_missing_file():
    with pytest.raises(ModelFileError, match="not found"):
        read_gguf("/nonexistent/model.gguf")


def test_not_a_gguf(tmp_path):
    p = tmp_path / "notes.gguf"
    p.write_text("this is not a model, just some text that is long enough")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        read_gguf(p)


def test_truncated_tensor_data(tmp_path, bundled_path):
    p = tmp_path / "cut.gguf"
    with open(bundled_path, "rb") as src, open(p, "wb") as dst:
        dst.write(src.read(20_000_000))
    with pytest.raises(ModelFileError, match="truncated.*missing"):
        read_gguf(p)


def test_truncated_header(tmp_path, bundled_path):
    p = tmp_path / "head.gguf"
    with open(bundled_path, "rb") as src, open(p, "wb") as dst:
        dst.write(src.read(5000))
    with pytest.raises(ModelFileError, match="truncated or corrupt"):
        read_gguf(p)


def test_corrupt_counts(tmp_path):
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2**60).to_bytes(8, "little") * 2 + b"\0" * 64)
    with pytest.raises(ModelFileError, match="corrupt"):
        read_gguf(p)


def test_written_header_round_trips(tmp_path):
    p = write_gguf(tmp_path / "t.gguf", {"general.architecture": "llama", "llama.block_count": 2,
                                         "tokenizer.ggml.tokens": ["a", "b"]},
                   tensors=[("blk.0.w", (8, 4), 0), ("blk.1.w", (8, 4), 0), ("out", (4,), 0)])
    info = model_info(p)
    assert info.layer_bytes == [128, 128] and info.other_bytes == 16
    assert info.tokens == ["a", "b"]


def test_a_header_read_for_sizes_counts_the_vocabulary_without_decoding_it(tmp_path, bundled_path):
    # The library's listing and the planner need the vocabulary's length, not its 49k strings:
    # decoding them under the GIL on a background thread stalled the window.
    from engine.models.gguf_header import CountedStrings
    from engine.sizing.shape import spec_from_gguf

    full, sizes = read_gguf(bundled_path), read_gguf(bundled_path, vocab=False)
    tokens = sizes.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, CountedStrings) and len(tokens) == len(full.metadata["tokenizer.ggml.tokens"]) == 49152
    with pytest.raises(TypeError, match="without its strings"):
        tokens[0]
    assert sizes.metadata.keys() == full.metadata.keys()
    assert all(v == full.metadata[k] for k, v in sizes.metadata.items() if not isinstance(v, CountedStrings))
    assert [t.name for t in sizes.tensors] == [t.name for t in full.tensors]
    assert isinstance(full.metadata["tokenizer.ggml.merges"], CountedStrings)  # nothing reads BPE merges
    assert spec_from_gguf(bundled_path).n_vocab == 49152
    # A short string array is still read, and a vocabulary whose lengths run past the file is caught.
    p = write_gguf(tmp_path / "t.gguf", {"general.architecture": "llama", "tokenizer.ggml.tokens": ["a", "b"]},
                   tensors=[("blk.0.w", (8, 4), 0)])
    assert read_gguf(p, vocab=False).metadata["tokenizer.ggml.tokens"] == ["a", "b"]
    cut = tmp_path / "cut.gguf"
    with open(bundled_path, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(300_000))  # inside the token strings
    with pytest.raises(ModelFileError, match="truncated or corrupt"):
        read_gguf(cut, vocab=False)


def test_model_info_is_read_once_per_file_version(tmp_path, bundled_path):
    import os

    p = tmp_path / "m.gguf"
    os.link(bundled_path, p) if os.stat(bundled_path).st_dev == os.stat(tmp_path).st_dev else p.write_bytes(
        bundled_path.read_bytes())
    first = model_info(p)
    assert model_info(p) is first  # remembered (the draft search asks for it per model per badge)
    p.unlink()
    write_gguf(p, {"general.architecture": "llama", "llama.block_count": 1, "tokenizer.ggml.tokens": ["a"]},
               tensors=[("blk.0.w", (8, 4), 0)])
    second = model_info(p)
    assert second is not first and second.tokens == ["a"]  # another file at that path: read again


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=120)


def test_cli_info_prints_metadata(bundled_path):
    r = _cli("info", str(bundled_path))
    assert r.returncode == 0, r.stderr
    assert "n_kv_heads" in r.stdout and "Q4_1" in r.stdout


@pytest.mark.parametrize("kind", ["missing", "text", "truncated", "arch"])
def test_cli_errors_are_one_line_without_traceback(tmp_path, bundled_path, kind):
    p = tmp_path / "m.gguf"
    if kind == "text":
        p.write_text("hello " * 100)
    elif kind == "truncated":
        with open(bundled_path, "rb") as src:
            p.write_bytes(src.read(30_000_000))
    elif kind == "arch":
        write_gguf(p, {"general.architecture": "frobnicator", "frobnicator.block_count": 1})
    r = _cli("chat", "--model", str(p))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    err_lines = [ln for ln in r.stderr.splitlines() if ln.startswith("hearth: error:")]
    assert len(err_lines) == 1, r.stderr
    expect = {"missing": "not found", "text": "not a GGUF", "truncated": "truncated",
              "arch": "architecture 'frobnicator' is not supported"}[kind]
    assert expect in err_lines[0]


def test_cli_chat_streams_and_resets():
    r = subprocess.run([sys.executable, "-m", "engine", "chat", "--temp", "0", "--max-tokens", "8", "--ctx", "512",
                        "--draft", "ngram"],
                       input="Hi there\n/reset\nWhat is two plus two?\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert r.stderr.count("tok/s") == 2 and "conversation cleared" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_folder_of_models_is_searched_for_projectors_from_each_files_first_key(tmp_path, bundled_path,
                                                                                 monkeypatch):
    # Every load looks beside the model for a vision projector, and the draft search does so for each
    # model in the models folder: reading each neighbour's whole header (a walk over 150k vocabulary
    # strings under the GIL) made that O(files^2) parses and stalled the window while it loaded.
    import engine.models.projector as projector
    from engine.models.gguf_header import read_architecture

    for i in range(3):
        (tmp_path / f"model{i}.gguf").symlink_to(bundled_path)
    clip = write_gguf(tmp_path / "eyes.gguf", {"general.architecture": "clip", "clip.has_vision_encoder": True,
                                               "clip.vision.projection_dim": 576}, tensors=[("v.w", (4,), 0)])
    late = write_gguf(tmp_path / "late.gguf", {"general.name": "x", "general.architecture": "llama"})
    assert read_architecture(bundled_path) == "llama" and read_architecture(clip) == "clip"
    assert read_architecture(late) == "llama"  # found after other keys too
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "text.gguf").write_text("not a model")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(bundled_path.read_bytes()[:30])
    assert [read_architecture(tmp_path / n) for n in ("empty.gguf", "text.gguf", "cut.gguf", "gone.gguf")] == [None] * 4

    parsed: list[str] = []
    real = projector.read_gguf
    monkeypatch.setattr(projector, "read_gguf", lambda p, **kw: parsed.append(Path(p).name) or real(p, **kw))
    assert projector.find_projector(tmp_path / "model0.gguf", 576) == clip
    assert parsed == ["eyes.gguf"]  # only the projector's whole header was read
    assert not projector.is_projector(tmp_path / "model1.gguf") and projector.is_projector(clip)
