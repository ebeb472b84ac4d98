"""The model library's work off the GUI thread: plain data in, plain data out (LibraryView runs them)."""
from __future__ import annotations

from pathlib import Path

from engine import HearthError
from engine.library import FIT_NO, Library, LibraryModel, badge_for_plan, compatible_drafts


def scan(library: Library, loaded: str | None) -> tuple[list[LibraryModel], list[LibraryModel]]:
    """The models on disk and the loaded model's drafts."""
    models = library.scan()
    return models, compatible_drafts(loaded, models) if loaded and loaded.endswith(".gguf") else []


def own_settings(models: list[LibraryModel], entries: dict, memo: Path) -> dict[str, str]:
    """{model's key: one line on its own settings}: what it recommends and yours for it (a model never
    hashed is not hashed here: its own settings are found once it has been loaded)."""
    from engine.library import LAYER_LABELS, settings_for_model

    out: dict[str, str] = {}
    for m in models:
        if m.error:
            continue
        got = settings_for_model(m.kind, str(m.path), entries, memo, memo_only=True).layered()
        parts = [f"{k} {v} ({LAYER_LABELS[got.layers[k]]})" for k, v in got.values.items()
                 if got.layers[k] in ("model", "yours") and k not in ("system_prompt", "messages")]
        if "system_prompt" in got.values:
            parts.append("a system prompt of its own")
        if parts:
            out[m.key] = "its own settings: " + ", ".join(parts)
    return out


def plan_all(models: list[LibraryModel], hardware, report) -> None:
    """The planner's verdict for each model, reported one by one as (key, badge, summary)."""
    from engine.sizing import plan_for

    import engine.loading as plan_load

    machines: dict[str, object] = {}
    for m in models:
        fmt = "gguf" if m.kind == "gguf" else "hf"
        try:
            hw = hardware or machines.get(fmt) or machines.setdefault(fmt, plan_load.machine(fmt, torch_ok=False))
            badge, summary = badge_for_plan(plan_for(str(m.path), hw))
        except HearthError as e:
            badge, summary = FIT_NO, str(e)
        if not report(m.key, badge, summary):
            return  # the page was closed: nobody to tell


def import_files(library: Library, paths: list[str]) -> tuple[list[str], list[str]]:
    """Copy each file into the models folder: (paths added, one line per file that was not)."""
    added, problems = [], []
    for p in paths:
        try:
            added.append(str(library.import_gguf(p)))
        except (HearthError, OSError) as e:
            problems.append(f"{Path(p).name}: {e}")
    return added, problems
