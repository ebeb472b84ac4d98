"""The speech models on this machine, for the model library: the bundled two, the faster-whisper
repositories and Piper voices in the Hugging Face cache (downloaded through Settings → Voice), and any
the user chose by path; each with its size and whether it fits this machine's memory.

Nothing here downloads or loads a model: the cache is read as it is, each model through the same
checks Settings → Voice uses (engine/voice/models.py).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable

from ..library.errors import LibraryError
from ..library.hf_cache import cached_model_repos, delete_cached
from ..library.local import FIT_CPU, FIT_NO, ORIGIN_BUNDLED, ORIGIN_HF, ORIGIN_MODELS
from .models import BUNDLED, SpeechModel, VoiceUnavailable, on_hub, piper_voice, voice_installed, whisper_model

# Memory a speech model takes while it works, per byte on disk, measured on the bundled models on this
# project's CPU machine (peak resident memory over the libraries' own): Whisper tiny.en's 78 MB folder
# took 166 MB loading and transcribing 28 s (CTranslate2 reads the float16 weights, then makes int8
# ones); Piper joe's 63 MB voice took 196 MB speaking three long sentences.
RAM_PER_BYTE = {"whisper": 2.2, "piper": 3.2}


def speech_models_on_disk(hf_cache: Path | None = None, chosen: Iterable[str] = ()) -> list[SpeechModel]:
    """The bundled models, the speech models in ``hf_cache`` (default: the standard cache), and the
    models ``chosen`` by path (Settings → Voice) that are none of those. Empty without voice installed."""
    if not voice_installed():
        return []
    out: list[SpeechModel] = []
    for find in (whisper_model, piper_voice):
        try:
            out.append(find(BUNDLED))
        except VoiceUnavailable:
            pass  # a bundled package missing: the rest still lists
    out += _in_models_folder()
    if hf_cache is None:
        from ..models.hub import hub_cache_dir

        hf_cache = hub_cache_dir()
    out += _in_hub_cache(hf_cache)
    seen = {m.path.resolve() for m in out}
    for spec in chosen:
        if spec == BUNDLED or on_hub(spec) or not Path(spec).expanduser().exists():
            continue
        try:
            m = (piper_voice if spec.endswith(".onnx") else whisper_model)(spec)
        except VoiceUnavailable:
            continue  # Settings → Voice says what is wrong with it
        if m.path.resolve() not in seen:
            seen.add(m.path.resolve())
            out.append(m)
    return out


def _in_models_folder() -> list[SpeechModel]:
    """Speech models in Hearth's models folder (``models fetch-whisper-base`` puts Whisper base there):
    each faster-whisper folder, and each Piper voice."""
    from ..models.catalogue import model_dir

    folder = model_dir()
    out: list[SpeechModel] = []
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        try:
            if p.is_dir() and (p / "model.bin").is_file():
                out.append(dataclasses.replace(whisper_model(str(p)), origin=ORIGIN_MODELS))
            elif p.suffix == ".onnx" and p.with_name(p.name + ".json").is_file():
                out.append(dataclasses.replace(piper_voice(str(p)), origin=ORIGIN_MODELS))
        except VoiceUnavailable:
            continue  # not a whole model: not listed
    return out


def _in_hub_cache(cache: Path) -> list[SpeechModel]:
    """Each model repository's newest snapshot: a faster-whisper model (model.bin and config.json at its
    top), and each Piper voice in it (an .onnx with its .onnx.json), as a Hub id Settings can name."""
    out: list[SpeechModel] = []
    for repo in cached_model_repos(cache):
        if not repo.revisions:
            continue
        rev = max(repo.revisions, key=lambda r: r.last_modified)
        names = {str(f.file_path.relative_to(rev.snapshot_path)) for f in rev.files}
        found: list[tuple[SpeechModel, str]] = []
        try:
            if {"model.bin", "config.json"} <= names:
                found.append((whisper_model(str(rev.snapshot_path)), repo.repo_id))
            for name in sorted(n for n in names if n.endswith(".onnx") and n + ".json" in names):
                found.append((piper_voice(str(rev.snapshot_path / name)), f"{repo.repo_id}:{name}"))
        except VoiceUnavailable:
            continue  # half a model (a download cut short): not listed until it is whole
        out += [dataclasses.replace(m, spec=spec, origin=ORIGIN_HF,
                                    name=spec if m.kind == "whisper" else f"{m.name} ({repo.repo_id})")
                for m, spec in found]
    return out


def speech_id(model: SpeechModel) -> str:
    """What a client calls a speech model in the API's ``model`` field: "bundled" for a bundled one, a Hub
    model's id, else its folder's name (a Whisper) or its file's stem (a Piper voice)."""
    if model.origin == ORIGIN_BUNDLED:
        return BUNDLED
    if model.origin == ORIGIN_HF:
        return model.spec
    return model.path.stem if model.kind == "piper" else model.path.name


def find_speech_model(models: Iterable[SpeechModel], kind: str, name: str) -> SpeechModel | None:
    """The ``kind`` ("whisper" or "piper") model of ``models`` that ``name`` names: its API id, its name as the
    library shows it, what Settings → Voice calls it, or its file's or folder's name."""
    for m in models:
        if m.kind == kind and name in (speech_id(m), m.name, m.spec, m.path.name, m.path.stem):
            return m
    return None


def speech_fit(model: SpeechModel, hardware=None) -> tuple[str, str]:
    """Whether ``model`` fits this machine (or ``hardware``): the library's badge and one line. Speech
    models run on the CPU, so the question is the RAM available."""
    from ..sizing.hardware import format_size, probe

    hw = hardware or probe()
    need = int(model.size_bytes * RAM_PER_BYTE[model.kind])
    if need > hw.ram_available:
        return FIT_NO, (f"needs about {format_size(need)} of RAM while it works; "
                        f"{format_size(hw.ram_available)} is available")
    return FIT_CPU, (f"runs on the CPU with about {format_size(need)} of RAM while it works "
                     f"({format_size(hw.ram_available)} available)")


def delete_speech_model(model: SpeechModel, hf_cache: Path | None = None) -> None:
    """Delete a speech model the Hub put in the cache, or one in Hearth's models folder (the bundled
    ones and the user's own files elsewhere are never deleted here). A Whisper model goes with its
    snapshot or folder; a Piper voice with its .onnx.json."""
    import shutil

    if not model.deletable:
        raise LibraryError(f"{model.name} is not a download in the Hugging Face cache or Hearth's models "
                           "folder; only those are deleted from Hearth")
    if model.origin == ORIGIN_MODELS:
        if model.kind == "whisper":
            shutil.rmtree(model.path)
        else:
            model.path.unlink()
            model.config_path.unlink(missing_ok=True)
        return
    if hf_cache is None:
        from ..models.hub import hub_cache_dir

        hf_cache = hub_cache_dir()
    if model.kind == "whisper":
        delete_cached(model.path, hf_cache, snapshot=True)
    else:
        for f in (model.path, model.config_path):
            delete_cached(f, hf_cache, snapshot=False)
