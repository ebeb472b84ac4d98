"""The model library: every model on disk and whether it fits this machine (local.py; the Hugging Face
cache's models listed and deleted in hf_cache.py, errors.py its error), browsing the Hugging Face Hub
before downloading (hub_search.py), and each model's own settings (model_settings,
model_store, model_defaults, preset_files). It stands above sizing, which it asks.

This package is public: the app uses the library through the names below (docs/layout.md, "The
engine's face"), with the model files' names it needs (the bundled model, a Hub id, a download, a
model's recommendations) from engine.models. Each is imported from its module when first asked.
"""
from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:
    from ..models.catalogue import BUNDLED_NAME, bundled_model_path, parse_hub_id, resolve
    from ..models.hub import DownloadCancelled, discard_partial, download
    from ..models.recommended import NONE as NO_RECOMMENDATION
    from ..models.recommended import Recommended
    from .hub_search import HubFile, HubOffline, fit, repo_files, search
    from .local import (FIT_GPU, FIT_NO, LIBRARY_FILE, ORIGIN_BUNDLED, ORIGIN_HF, Library, LibraryModel,
                        badge_for_plan, compatible_drafts)
    from .model_defaults import ServedDefaults
    from .model_defaults import model_settings as settings_for_model
    from .model_settings import (CHAT_KEYS, CONTEXT_MAX, CONTEXT_MIN, LAYER_LABELS, LOAD_KEYS, SAMPLING_KEYS,
                                 TUNED_KEYS, Layered, budget_problem, default_sampling, layered, values_problem)
    from .model_store import FILE_NAME as MODEL_SETTINGS_FILE
    from .model_store import ModelEntry, ModelStore, memo_dir, model_key, model_path
    from .preset_files import export_preset, read_preset_file

_WHERE = {
    **dict.fromkeys(["BUNDLED_NAME", "bundled_model_path", "parse_hub_id", "resolve"], "..models.catalogue"),
    **dict.fromkeys(["DownloadCancelled", "discard_partial", "download"], "..models.hub"),
    "NO_RECOMMENDATION": "..models.recommended:NONE", "Recommended": "..models.recommended",
    **dict.fromkeys(["HubFile", "HubOffline", "fit", "repo_files", "search"], ".hub_search"),
    **dict.fromkeys(["FIT_GPU", "FIT_NO", "LIBRARY_FILE", "ORIGIN_BUNDLED", "ORIGIN_HF", "Library", "LibraryModel",
                     "badge_for_plan", "compatible_drafts"], ".local"),
    "ServedDefaults": ".model_defaults", "settings_for_model": ".model_defaults:model_settings",
    **dict.fromkeys(["CHAT_KEYS", "CONTEXT_MAX", "CONTEXT_MIN", "LAYER_LABELS", "LOAD_KEYS", "SAMPLING_KEYS",
                     "TUNED_KEYS", "Layered", "budget_problem", "default_sampling", "layered", "values_problem"],
                    ".model_settings"),
    "MODEL_SETTINGS_FILE": ".model_store:FILE_NAME",
    **dict.fromkeys(["ModelEntry", "ModelStore", "memo_dir", "model_key", "model_path"], ".model_store"),
    **dict.fromkeys(["export_preset", "read_preset_file"], ".preset_files"),
}
__all__ = ["BUNDLED_NAME", "CHAT_KEYS", "CONTEXT_MAX", "CONTEXT_MIN", "DownloadCancelled", "FIT_GPU", "FIT_NO",
           "HubFile", "HubOffline", "LAYER_LABELS", "LIBRARY_FILE", "LOAD_KEYS", "Layered", "Library", "LibraryModel",
           "MODEL_SETTINGS_FILE", "ModelEntry", "ModelStore", "NO_RECOMMENDATION", "ORIGIN_BUNDLED", "ORIGIN_HF",
           "Recommended", "SAMPLING_KEYS", "ServedDefaults", "TUNED_KEYS", "badge_for_plan", "budget_problem",
           "bundled_model_path", "compatible_drafts", "default_sampling", "discard_partial", "download",
           "export_preset", "fit", "layered", "memo_dir", "model_key", "model_path", "parse_hub_id",
           "read_preset_file", "repo_files", "resolve", "search", "settings_for_model", "values_problem"]
__getattr__ = lazy_exports(__name__, _WHERE)
