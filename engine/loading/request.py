"""What a user asks to load: a LoadRequest, the one typed description of a load.

The window's settings, ``engine serve``/``chat``/``plan``, ``bench tune`` and
``bench sizing`` all describe a load this way; the plan fills in whatever is
left on Auto (``None`` or "auto"). A model is a string plus its *source*: the
bundled GGUF, a local GGUF file, a local transformers folder or a Hugging Face
Hub id. Settings files keep a load as a plain dict (``last_working``):
:meth:`LoadRequest.from_dict` reads the ones older versions wrote.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..config import default_exactness
from ..errors import HearthError, ModelFileError
from ..models.hf_folder import check_hf_folder
from ..sizing.load_spec import (BACKENDS, BUNDLED, HUB_PLACEHOLDER, KV_TYPES, QUANTS, SOURCES,  # noqa: F401
                                check_model_string, effective_backend, infer_source, is_remote, remote_model,
                                runs_gguf, split_remote)

@dataclass(slots=True, frozen=True)
class LoadRequest:
    """One load as the user chose it; every field left on Auto is the plan's to fill in.

    ``cpu_only``: this once on the CPU, with the sentence that says why (a GPU failed or
    stopped the last run). ``retry_after``: a reply's out-of-memory message, so the load
    starts from the next smaller plan. Neither is a setting: :meth:`plain` drops both."""
    model: str = BUNDLED            # "bundled", a .gguf path, a transformers folder or a Hub id
    source: str | None = None       # one of SOURCES; None: worked out from ``model`` when made
    backend: str = "auto"           # one of BACKENDS
    quant: str = "auto"             # one of QUANTS (transformers only; a GGUF carries its own)
    context: int | None = None      # None: Auto
    draft: str = "auto"             # "auto", "none", "ngram" or a draft GGUF path
    mmproj: str = "auto"            # a GGUF's vision projector: "auto" (the one beside it), "none" or a path
    n_threads: int | None = None    # None: Auto
    threads_poll: int | None = None  # llama.cpp's poll level 0-100 on a pool of Hearth's own; None: llama.cpp's default
    gpu_layers: int | str | None = None  # None: Auto; "all"; or a number
    kv_type: str = "auto"           # one of KV_TYPES
    exactness: str = field(default_factory=default_exactness)  # one of engine.config.EXACTNESS
    # The local server's API sequences: the plan counts their KV streams beside the window's in the
    # model's one context (0: no server). The server's setting, not the model's: settings files do not keep it.
    server_parallel: int = 0
    # Other machines whose devices take layers (engine/workers/machines.py: host:port, user@host). A load
    # with any runs in a child process: a worker lost mid-reply aborts the process llama.cpp's RPC client is in.
    workers: tuple[str, ...] = ()
    cpu_only: str | None = None
    retry_after: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.server_parallel, int) or self.server_parallel < 0:
            raise HearthError(f"server_parallel must be a whole number >= 0, got {self.server_parallel!r}")
        if not isinstance(self.workers, tuple):  # a settings file's list
            object.__setattr__(self, "workers", tuple(self.workers or ()))
        if self.source is None and isinstance(self.model, str):
            # Worked out once, so that two requests for the same model compare equal.
            object.__setattr__(self, "source", infer_source(self.model or BUNDLED))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LoadRequest":
        """A load saved as a dict (a settings file's ``last_working``). A key saved before a field
        existed means that field's default; keys this version does not know are ignored."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for k in ("backend", "quant", "kv_type", "exactness", "draft", "mmproj"):
            if kw.get(k) is None:
                kw.pop(k, None)  # null in an old file: the default, as a missing key
        return cls(**kw)

    def as_dict(self) -> dict[str, Any]:
        """The settings' part of this load as a plain dict (what ``last_working`` saves)."""
        d = {k: v for k, v in asdict(self).items() if k not in ("cpu_only", "retry_after", "server_parallel")}
        d["workers"] = list(self.workers)  # as JSON keeps it
        return d

    def plain(self) -> "LoadRequest":
        """The settings' own request, without a retry's notes (out of memory, CPU only)."""
        return replace(self, cpu_only=None, retry_after=None)

    @property
    def model_source(self) -> str:
        """The source, worked out from the model when the request does not say."""
        return self.source or infer_source(self.model or BUNDLED)

    @property
    def effective_backend(self) -> str:
        """"llama_cpp" or "hf": the chosen backend, or the one the model's type calls for."""
        return effective_backend(self.model_source, self.model or BUNDLED, self.backend or "auto")

    @property
    def plan_format(self) -> str | None:
        """"gguf" (llama.cpp) or "hf" (transformers): the planner that covers this load;
        None for a GGUF file run on transformers, which no planner covers."""
        if self.effective_backend == "llama_cpp":
            return "gguf"
        if self.effective_backend == "remote":
            return None  # the server's memory, not this machine's
        return None if runs_gguf(self.model_source, self.model or BUNDLED) else "hf"

    @property
    def title(self) -> str:
        """How a load is named to the user: a file or folder by its name, a Hub id in full."""
        model = self.model or BUNDLED
        if model == BUNDLED:
            return "the bundled model"
        if self.model_source == "remote":
            from ..remote.transport import Endpoint

            url, mid = split_remote(model)
            try:
                host = Endpoint.parse(url).address
            except HearthError:
                host = url
            return f"{mid or 'the first model'} on {host}"
        return model if self.model_source == "hub" else (Path(model).name or model)

    def model_ref(self):
        """The engine's ModelRef for this request, honouring the chosen source:
        a missing local path is an error, never silently taken for a Hub id."""
        from ..models.catalogue import ModelRef, is_hub_id, resolve

        model = self.model or BUNDLED
        source = self.model_source
        if source == "bundled":
            return resolve(None)
        if source == "remote":
            raise HearthError(f"{self.title} runs on its server; there is no file here to load")
        if source == "hub":
            if not is_hub_id(model):
                raise HearthError(f"{model!r} is not a Hub id (owner/name, owner/name:QUANT or owner/name/file.gguf)")
            return ModelRef("hub", Path(model), model)
        p = Path(model).expanduser()
        if source == "hf_dir":
            check_hf_folder(p)
            return ModelRef("hf_dir", p.resolve(), p.name)
        if not p.is_file():
            if p.is_dir():
                raise ModelFileError(f"{p} is a folder; choose “Hugging Face folder” for a transformers model")
            raise ModelFileError(f"model file not found: {p}")
        return ModelRef("gguf", p.resolve(), p.name)


class ModelCheck:
    """What can be known about a model choice without loading it, with the reason the
    engine would give when it cannot load; a GGUF file's metadata is read once and kept."""

    def __init__(self) -> None:
        self._info: dict[str, Any] = {}

    def info(self, model: str):
        """GGUF metadata for ``model`` ("bundled" or a path); raises HearthError with a clear message."""
        from ..models.catalogue import bundled_model_path
        from ..models.gguf import model_info

        if model not in self._info:
            if not model:
                raise HearthError("choose a .gguf file")
            path = bundled_model_path() if model == BUNDLED else Path(model).expanduser()
            if not path.is_file():
                raise HearthError(f"model file not found: {path}")
            self._info[model] = model_info(path)
        return self._info[model]

    def check(self, source: str, model: str):
        """A GGUF file's metadata, or None for a folder or a Hub id that looks loadable;
        raises HearthError with the reason the engine would give."""
        from ..models.catalogue import is_hub_id

        if source in ("bundled", "gguf"):
            return self.info(model)
        if source == "remote":
            check_model_string(source, model)  # the server answers when it loads
            return None
        if not model:
            raise HearthError("choose a model folder" if source == "hf_dir" else "type a Hub id")
        if source == "hf_dir":
            check_hf_folder(Path(model).expanduser())
        elif not is_hub_id(model):
            raise HearthError(f"{model!r} is not a Hub id; type {HUB_PLACEHOLDER}")
        return None
