"""``python -m engine models``: model files (fetch the benchmark pair, a multilingual Whisper, list them) and
``models defaults MODEL``: a model's settings, layer by layer, changed from a terminal with ``--set
key=value``, ``--import FILE`` (an Ollama Modelfile, an LM Studio preset, Hearth's export) and ``--reset``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..errors import HearthError


def cmd_models(a: argparse.Namespace) -> int:
    """The ``models`` command's actions."""
    if a.action == "defaults":
        return defaults(a)
    if a.model is not None or a.set or a.import_file or a.reset:
        raise HearthError(f"models {a.action} takes no model and no --set, --import or --reset "
                          "(those are for `models defaults MODEL`)")
    from ..models import catalogue as models

    pair = (models.BENCH_DRAFT, models.BENCH_TARGET)
    if a.action == "fetch-bench-pair":
        for m in pair:
            path = models.assemble_chunked(m, progress=lambda msg: print(msg, file=sys.stderr))
            print(path)
        return 0
    if a.action == "fetch-whisper-base":
        from ..voice.fetch import fetch_whisper_base

        print(fetch_whisper_base(progress=lambda msg: print(msg, file=sys.stderr)))
        return 0
    print(f"bundled  {models.bundled_model_path()}")
    for m in pair:
        print(f"bench    {models.bench_model_path(m) or '(not fetched) ' + m.filename}")
    return 0


def _shown(v: Any, width: int = 60) -> str:
    """A value in one short line."""
    text = "none" if v is None else repr(v) if isinstance(v, str) else \
        json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else str(v)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[:width - 1] + "…"


def defaults(a: argparse.Namespace) -> int:
    """Print ``a.model``'s settings and where each comes from; with ``--set``/``--import``/``--reset`` change
    the user's settings for it first (every change is checked before anything is written)."""
    from ..library.model_defaults import model_settings, source_of
    from ..library.model_settings import LAYER_LABELS, parse_value
    from ..library.model_store import ModelEntry, ModelStore, memo_dir
    from ..library.preset_files import read_preset_file
    from ..paths import data_dir

    model = a.model or "bundled"
    store = ModelStore()
    entries, notice = store.load()
    if notice:
        print(f"note: {notice}", file=sys.stderr)
    ms = model_settings(source_of(model), model, entries, memo_dir(data_dir()))
    if ms.key is None:
        raise HearthError(f"{model} cannot be found on disk (a Hub model is known once it is downloaded), "
                          "so its settings cannot be kept")
    key, values = ms.key, dict(ms.yours)
    if a.import_file:
        path = Path(a.import_file).expanduser()
        try:
            preset = read_preset_file(path)
        except HearthError as e:
            raise HearthError(f"{path.name}: {e}") from None
        for note in preset.notes:
            print(f"note: {path.name}, {note}", file=sys.stderr)
        values.update(preset.values)
    for item in a.set:
        name, eq, text = item.partition("=")
        if not eq:
            raise HearthError(f"--set takes key=value, got {item!r}")
        values[name.strip()] = parse_value(name.strip(), text)
    for name in a.reset:
        if name == "all":
            values.clear()
        else:
            values.pop(name, None)
    if values != ms.yours:
        entries[key] = ModelEntry(ms.name, values)
        store.save(entries)
        ms = model_settings(source_of(model), model, entries, memo_dir(data_dir()))
    got = ms.layered()
    if a.json:
        print(json.dumps({"model": ms.name, "key": key, **got.describe()}, indent=2, ensure_ascii=False))
        return 0
    print(f"{ms.name}  ({key[:16]}…)  kept in {store.path}")
    for k, v in got.values.items():
        print(f"  {k:18} {_shown(v, 40):41} {LAYER_LABELS[got.layers[k]]}")
    if ms.recommended.source:
        print(f"  the model's recommendations come from {ms.recommended.source}")
    for note in got.notes:
        print(f"  note: {note}")
    return 0
