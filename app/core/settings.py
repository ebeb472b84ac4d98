"""The one place settings are read, validated and written. Qt-free.

``settings.json`` lives in the platform config folder (or ``HEARTH_DATA_DIR``).
Writes are atomic (temp file, fsync, ``os.replace``), so a crash mid-write
leaves the old file intact. A file that cannot be parsed is moved aside with a
message, never overwritten. In one that parses, a field that does not validate
(say, a value only a newer Hearth knows) takes its default and the others are
kept; the message names the field, and the original is moved aside as a backup.
The model choice that last loaded successfully is kept under ``last_working``
so a failed load can roll back.

Files written before a field existed still load: a missing ``source`` is worked out from ``model`` (older
files hold only "bundled" or a GGUF path), a missing field means its default (Auto, drop the oldest turns).
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from engine import EXACTNESS, HearthError, SamplingParams, atomic_write, default_exactness
from engine.library import (MODEL_SETTINGS_FILE, SAMPLING_KEYS, TUNED_KEYS, ModelEntry, ModelStore, budget_problem,
                            default_sampling as _default_sampling, values_problem)
from engine.loading import (BACKENDS, BUNDLED, KV_TYPES, QUANTS, SOURCES, LoadRequest, check_model_string, check_poll,
                            effective_backend, infer_source, runs_gguf)
from engine.prompt import CONTEXT_POLICIES
from engine.workers import is_address

from app.core import mcp_servers as mcp, server_settings, voice_settings
from app.core.paths import config_dir, data_dir, move_aside
from app.core.presets import DEFAULT_PRESETS, valid_presets
from app.core.settings_upgrade import upgraded, valid_sampling
from app.core.tuning_records import memoised, invalid_records, settled

FILE_NAME = "settings.json"
FORMAT_VERSION = 4  # what each version changed: app/core/settings_upgrade.py
THEMES = ("system", "light", "dark")
DRAFTS = ("auto", "none")
MAX_CONTEXT = 1 << 20
DEFAULT_CONTEXT_POLICY = "drop_oldest"
LOAD_KEYS = ("model", "source", "backend", "quant", "context", "draft", "n_threads", "threads_poll", "gpu_layers",
             "kv_type", "exactness", "mmproj", "workers")
# The load settings a "Benchmark this model" row can set as a model's own (engine/library/model_settings.py).
TUNABLE_KEYS = TUNED_KEYS



def is_draft_file(v: Any) -> bool:
    """A draft chosen by name: the path of a .gguf file on disk (the library lists the compatible ones)."""
    return isinstance(v, str) and v.lower().endswith(".gguf") and os.path.isfile(v)


class SettingsError(ValueError):
    """A settings value is invalid; the message names the field and the rule."""


@dataclass(slots=True)
class Settings:
    model: str = BUNDLED            # "bundled", a .gguf path, a transformers folder or a Hub id
    source: str | None = None       # "bundled" | "gguf" | "hf_dir" | "hub"; None: worked out from model
    backend: str = "auto"           # "auto" (follows the model's type) | "llama_cpp" | "hf"
    quant: str = "auto"             # transformers only: "auto" | "none" | "int8" | "int4"
    context: int | None = None      # None = Auto (the engine picks)
    draft: str = "auto"             # "auto" | "none" | the path of a draft GGUF (the library's compatible ones)
    mmproj: str = "auto"            # a GGUF's vision projector: "auto" (the one beside it) | "none" | a .gguf path
    n_threads: int | None = None    # None = the engine's default
    threads_poll: int | None = None  # llama.cpp's thread-pool poll level 0-100; None = llama.cpp's default threads
    gpu_layers: int | str | None = None  # None = Auto (the memory plan), "all", or blocks on the GPU
    kv_type: str = "auto"           # "auto" (the memory plan) | "f16" | "q8_0" | "q4_0"
    exactness: str = field(default_factory=default_exactness)  # "exact" | "fast" (see EXACTNESS)
    workers: tuple[str, ...] = ()   # machines whose devices take layers (Settings → Machines; host:port, user@host)
    # model's key -> {"applied": {...}, "previous": {...}}: what "Apply best" set as the model's own settings
    # and the model's own values it replaced (app/core/tuning_records.py)
    tuning: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # the same, kept by the model's path before version 4 (then applied to every model): moved to
    # ``tuning`` once the model is known by its content
    tuning_by_path: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=_default_sampling)
    presets: list[dict[str, str]] = field(default_factory=lambda: [dict(p) for p in DEFAULT_PRESETS])
    default_preset: str = "None"    # preset a new conversation starts with
    theme: str = "system"
    # A chat longer than the context (engine/prompt/view.py): "stop" (refuse the send and say so),
    # "drop_oldest" (leave out the oldest turns in steps), "shift" (the same, moved in the KV instead of
    # read again) or "compact" (summarized by the model). A chat may keep its own (Store). With each reply.
    context_policy: str = DEFAULT_CONTEXT_POLICY
    server_enabled: bool = False    # the local API (Settings → Local server, app/bridge/server_host.py)
    server_port: int = server_settings.PORT
    server_api_key: str = ""        # "" asks for no key; else clients send "Authorization: Bearer <key>"
    server_cors: list[str] = field(default_factory=list)  # web origins allowed to call it (none by default)
    server_listen: str = ""         # "": 127.0.0.1 only; an address: other devices too (TLS and a key, always)
    # seconds an API request may wait for the model to start it, then 503 with Retry-After (0: no limit)
    server_max_queue_wait: int = server_settings.MAX_QUEUE_WAIT
    # MCP tools (Settings → Tools; app/core/mcp_servers.py says what each holds): no server by default.
    mcp_servers: list[dict[str, Any]] = field(default_factory=list)
    tool_allow: dict[str, str] = field(default_factory=dict)  # "Allow always": server/tool -> tools' fingerprint
    max_tool_calls: int = mcp.MAX_TOOL_CALLS          # per reply
    tool_timeout_s: float = mcp.TOOL_TIMEOUT_S        # per call
    tool_choice: str = "auto"  # a reply's first step: "auto" (the model decides) or "required" (it must call)
    voice: dict[str, Any] = field(default_factory=voice_settings.default)  # Settings → Voice (voice_settings.py)
    # Each model's own settings by its key (engine/library/model_store.py), kept in model-settings.json beside
    # settings.json, where `engine models defaults` reads and writes them too (app/core/model_defaults.py).
    models: dict[str, ModelEntry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source is None and isinstance(self.model, str):
            self.source = infer_source(self.model)
        self.workers = tuple(self.workers) if isinstance(self.workers, (list, tuple)) else self.workers
        if isinstance(self.models, dict):  # to_dict's copy of them: entries again (validate checks the rest)
            self.models = {k: ModelEntry(**e) if isinstance(e, dict) and set(e) == {"name", "values"} else e
                           for k, e in self.models.items()}

    # -- validation ---------------------------------------------------------

    def validate(self) -> "Settings":
        """Raise SettingsError for the first bad value; return self for chaining."""
        if not isinstance(self.model, str) or not self.model.strip():
            raise SettingsError("model: choose the bundled model, a .gguf file, a model folder or a Hub id")
        if self.source not in SOURCES:
            raise SettingsError(f"source: must be one of {', '.join(SOURCES)}, got {self.source!r}")
        if (self.source == "bundled") != (self.model == BUNDLED):
            raise SettingsError(f"source: {self.source!r} does not go with the model {self.model!r}")
        try:
            check_model_string(self.source, self.model)
        except HearthError as e:
            raise SettingsError(f"model: {e}") from None
        if self.backend not in BACKENDS:
            raise SettingsError(f"backend: must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.backend == "llama_cpp" and not runs_gguf(self.source, self.model):
            raise SettingsError("backend: llama.cpp runs GGUF files; a transformers folder or repository "
                                "runs on the transformers backend")
        if self.quant not in QUANTS:
            raise SettingsError(f"quant: must be one of {', '.join(QUANTS)}, got {self.quant!r}")
        if self.quant in ("int8", "int4") and self.effective_backend == "llama_cpp":
            raise SettingsError("quant: int8/int4 are transformers choices; a GGUF file on llama.cpp "
                                "carries its own quantization")
        if self.context is not None:
            if not isinstance(self.context, int) or isinstance(self.context, bool) or \
                    not 256 <= self.context <= MAX_CONTEXT:
                raise SettingsError(f"context: must be Auto or a whole number from 256 to {MAX_CONTEXT}, "
                                    f"got {self.context!r}")
        if self.mmproj not in ("auto", "none") and not is_draft_file(self.mmproj):
            raise SettingsError(f"mmproj: must be auto, none or a vision projector's .gguf file that exists, "
                                f"got {self.mmproj!r}")
        if self.draft not in DRAFTS and not is_draft_file(self.draft):
            raise SettingsError(f"draft: must be {', '.join(DRAFTS)} or a draft model's .gguf file that exists, "
                                f"got {self.draft!r}")
        if self.n_threads is not None and (not isinstance(self.n_threads, int) or self.n_threads < 1):
            raise SettingsError(f"n_threads: must be a positive whole number, got {self.n_threads!r}")
        try:
            if self.threads_poll is not None:
                check_poll(self.threads_poll)
        except HearthError:
            raise SettingsError(f"threads_poll: must be Auto or a whole number from 0 (no polling) to 100, "
                                f"got {self.threads_poll!r}") from None
        gl = self.gpu_layers
        if gl is not None and gl != "all" and (not isinstance(gl, int) or isinstance(gl, bool) or gl < 0):
            raise SettingsError(f"gpu_layers: must be Auto, all or a whole number from 0, got {gl!r}")
        if self.kv_type not in KV_TYPES:
            raise SettingsError(f"kv_type: must be one of {', '.join(KV_TYPES)}, got {self.kv_type!r}")
        if self.kv_type != "auto" and self.effective_backend == "hf":
            raise SettingsError("kv_type: the KV cache type is a choice for GGUF files on llama.cpp; "
                                "transformers keeps the cache in the model's compute dtype")
        if self.exactness not in EXACTNESS:
            raise SettingsError(f"exactness: must be one of {', '.join(EXACTNESS)}, got {self.exactness!r}")
        if not isinstance(self.workers, tuple) or not all(isinstance(w, str) and is_address(w) for w in self.workers):
            raise SettingsError(f"workers: each is host:port or user@host, got {self.workers!r}")
        for name in ("tuning", "tuning_by_path"):
            if invalid_records(getattr(self, name)):
                raise SettingsError(f"{name}: each model's entry needs the applied and previous settings "
                                    f"(only {', '.join(TUNABLE_KEYS)})")
        if self.theme not in THEMES:
            raise SettingsError(f"theme: must be one of {', '.join(THEMES)}, got {self.theme!r}")
        if self.context_policy not in CONTEXT_POLICIES:
            raise SettingsError(f"context_policy: must be one of {', '.join(CONTEXT_POLICIES)}, "
                                f"got {self.context_policy!r}")
        why = server_settings.problem(self.server_enabled, self.server_port, self.server_api_key, self.server_cors,
                                      self.server_listen, self.server_max_queue_wait) \
            or mcp.servers_problem(self.mcp_servers) \
            or mcp.tools_problem(self.tool_allow, self.max_tool_calls, self.tool_timeout_s, self.tool_choice) \
            or voice_settings.problem(self.voice)
        if why:
            raise SettingsError(why)
        for key, entry in self.models.items():
            why = values_problem(entry.values) if isinstance(entry, ModelEntry) else "not a model's settings"
            if why:
                raise SettingsError(f"models: {getattr(entry, 'name', key)}: {why}")
        unknown = set(self.sampling) - set(SAMPLING_KEYS)
        if unknown:
            raise SettingsError(f"sampling: unknown setting {sorted(unknown)[0]!r}")
        why = budget_problem(self.sampling.get("reasoning_budget"))
        if why:
            raise SettingsError(f"sampling: {why}")
        try:
            self.sampling_params()
        except (HearthError, TypeError) as e:
            raise SettingsError(f"sampling: {e}") from None
        if not isinstance(self.presets, list) or not all(
                isinstance(p, dict) and isinstance(p.get("name"), str) and p["name"].strip()
                and isinstance(p.get("prompt"), str) for p in self.presets):
            raise SettingsError("presets: each preset needs a non-empty name and a prompt text")
        names = [p["name"] for p in self.presets]
        if len(set(names)) != len(names):
            raise SettingsError("presets: two presets have the same name")
        if self.default_preset not in names:
            raise SettingsError(f"default_preset: no preset is called {self.default_preset!r}")
        return self

    # -- derived values -----------------------------------------------------

    def sampling_params(self) -> SamplingParams:
        s = {**_default_sampling(), **self.sampling}
        if s.get("reasoning_budget") is None:
            s.pop("reasoning_budget")  # no limit, the engine's default
        return SamplingParams(**s)

    def preset_prompt(self, name: str) -> str | None:
        return next((p["prompt"] for p in self.presets if p["name"] == name), None)

    def load_request(self) -> LoadRequest:
        """The part of the settings that decides which model is loaded and how."""
        return LoadRequest(**{k: getattr(self, k) for k in LOAD_KEYS})

    def with_load(self, req: LoadRequest) -> "Settings":
        """These settings with another model set-up (the retry notes of ``req`` are not settings)."""
        return replace(self, **{k: getattr(req, k) for k in LOAD_KEYS})

    @property
    def effective_backend(self) -> str:
        """"llama_cpp" or "hf": the chosen backend, or the one the model's type calls for."""
        return effective_backend(self.source, self.model, self.backend)

    @property
    def is_bundled(self) -> bool:
        return self.model == BUNDLED

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> "Settings":
        if not isinstance(d, dict):
            raise SettingsError("the file does not hold a settings object")
        known = {f.name for f in fields(cls)} - {"models"}  # kept in their own file
        kwargs = {k: v for k, v in d.items() if k in known}
        if "sampling" in kwargs and not isinstance(kwargs["sampling"], dict):
            raise SettingsError("sampling: must be an object")
        return cls(**kwargs).validate()

    @classmethod
    def salvage(cls, d: dict[str, Any]) -> tuple["Settings", list[str]]:
        """The settings in ``d`` with every invalid field at its default (a bad sampling
        knob or preset is dropped on its own), and one message per thing dropped."""
        known = {f.name for f in fields(cls)} - {"models"}  # kept in their own file
        kwargs = {k: v for k, v in d.items() if k in known}
        problems: list[str] = []
        if "sampling" in kwargs:
            kwargs["sampling"] = valid_sampling(kwargs["sampling"], problems)
        if "presets" in kwargs:
            kwargs["presets"] = valid_presets(kwargs["presets"], problems)
        if "mcp_servers" in kwargs:  # a bad server is left out on its own, the others kept
            kwargs["mcp_servers"] = mcp.valid_servers(kwargs["mcp_servers"], problems)
        for _ in range(len(known) + 1):
            try:
                return cls(**kwargs).validate(), problems
            except ValueError as e:  # SettingsError, or a path Python refuses (a NUL byte)
                name = str(e).partition(":")[0]
                problems.append(str(e))
                if name == "default_preset" and kwargs.get("presets"):
                    kwargs["default_preset"] = kwargs["presets"][0]["name"]
                elif name in kwargs:
                    del kwargs[name]  # a field that depends on it is checked again next time round
                else:
                    break
        return cls(), problems


class SettingsFile:
    """Reads and writes ``settings.json``; remembers the last model set-up that loaded."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else config_dir() / FILE_NAME
        self.last_working: LoadRequest | None = None
        self.models = ModelStore(self.path.with_name(MODEL_SETTINGS_FILE))  # each model's own settings
        self._models_on_disk: dict[str, ModelEntry] = {}  # what the last load or save left in it

    def load(self) -> tuple[Settings, str | None]:
        """Return the settings (each model's own included) and a message for the user (or None): see
        :meth:`_load_settings` and ModelStore.load for what a damaged file gives."""
        settings, notice = self._load_settings()
        settings.models, models_notice = self.models.load()
        self._models_on_disk = copy.deepcopy(settings.models)
        if settings.tuning_by_path:  # "Apply best" records kept by a model's path (before version 4) move
            settings = settled(settings, memoised(data_dir()))  # to the models known by their hash now
        return settings, " ".join(n for n in (notice, models_notice) if n) or None

    def _load_settings(self) -> tuple[Settings, str | None]:
        """settings.json's settings and a message for the user (or None).

        A missing file gives the defaults. One that cannot be read as a settings
        object is moved aside and the defaults are used, with a message saying
        where it went. In one that can, each invalid field takes its default and
        the rest are kept; the message names each field, and the original file is
        moved aside as a backup (the next save writes the settings in use).
        """
        self.last_working = None
        if not self.path.exists():
            return Settings(), None
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raise SettingsError("the file does not hold a settings object")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, SettingsError) as e:
            reason = e if isinstance(e, SettingsError) else f"{type(e).__name__}: {e}"
            moved = move_aside(self.path, "invalid")
            return Settings(), (f"The settings file could not be used ({reason}), so Hearth started "
                                f"with default settings. The old file was kept as {moved}.")
        raw = upgraded(raw)
        try:
            settings, problems = Settings.from_dict(raw), []
        except (ValueError, TypeError):  # SettingsError, or a path Python refuses (a NUL byte)
            settings, problems = Settings.salvage(raw)
        lw, raw_lw = None, raw.get("last_working")
        if raw_lw is not None:
            try:
                if not isinstance(raw_lw, dict):
                    raise SettingsError("not a model set-up")
                lw = LoadRequest.from_dict(raw_lw)  # a set-up saved before a field existed: its default
                Settings().with_load(lw).validate()
            except (ValueError, TypeError) as e:
                problems.append(f"last_working: {e} (a failed load now goes back to the bundled model)")
                lw = None
        self.last_working = lw
        if not problems:
            return settings, None
        moved = move_aside(self.path, "invalid")
        return settings, ("Some settings in the settings file could not be used and went back to their "
                          f"defaults: {'; '.join(problems)}. The other settings were kept; the original "
                          f"file was kept as {moved}.")

    def save(self, settings: Settings) -> None:
        """Write settings.json, and model-settings.json when a model's own settings changed (so a change
        `engine models defaults` made meanwhile is not written over by one the window never made)."""
        settings.validate()
        data = settings.to_dict()
        del data["models"]
        data["version"] = FORMAT_VERSION
        if self.last_working is not None:
            data["last_working"] = self.last_working.as_dict()
        atomic_write(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n")
        if settings.models != self._models_on_disk:
            self.models.save(settings.models)
            self._models_on_disk = copy.deepcopy(settings.models)

    def mark_working(self, settings: Settings) -> None:
        """Record that ``settings``' model set-up loaded successfully."""
        self.last_working = settings.load_request()
        self.save(settings)

    def rolled_back(self, settings: Settings) -> Settings:
        """``settings`` with the model set-up that last worked (the bundled model if none did)."""
        return settings.with_load(self.last_working or Settings().load_request())
