"""What the user chose for a load: a LoadSpec, with one ``AUTO`` for "let Hearth choose".

The window's settings, ``engine serve``/``chat``/``plan``, the tuning bench and the
library pool all describe a load this way; :func:`engine.sizing.load_plan.plan_load`
turns it into the frozen EngineConfig (and the memory plan behind it). Every choice
that Hearth can make for the user holds :data:`AUTO` until the plan decides it: the
context, GPU layers, threads, the KV cache type, quantization, the draft, the vision
projector, the backend, the prefix-cache budget. ``AUTO`` is written ``"auto"`` in a
settings file or JSON (``as_dict``/``from_dict``).

A model is a string plus its *source*: the bundled GGUF, a local GGUF file, a local
transformers folder, a Hugging Face Hub id or a server's model; the functions below
read a model string (sizing sits below loading on the engine's ladder, so they live here).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final, Literal, Union

from ..config import default_exactness
from ..errors import HearthError, ModelFileError
from ..models.hf_folder import check_hf_folder


class Auto(enum.StrEnum):
    """The one value of "let Hearth choose" (its only member is :data:`AUTO`).

    It is the text "auto" as well (equal to it, and what JSON writes), so a settings file or a command
    line that says "auto" means AUTO; a spec holds the member itself (test with ``is AUTO``)."""
    AUTO = "auto"

    def __repr__(self) -> str:
        return "AUTO"


AUTO: Final = Auto.AUTO
AutoType = Literal[Auto.AUTO]

BUNDLED = "bundled"
SOURCES = ("bundled", "gguf", "hf_dir", "hub", "remote")
BACKENDS = ("auto", "llama_cpp", "hf")
QUANTS = ("auto", "none", "int8", "int4")
KV_TYPES = ("auto", "f16", "q8_0", "q4_0")  # llama.cpp's KV cache types the window offers
HUB_PLACEHOLDER = "owner/name, owner/name:Q4_K_M or owner/name/file.gguf"


def infer_source(model: str) -> str:
    """The source of a model string from a settings file that does not say (older files held
    only "bundled" or a GGUF path; a hand-edited one may hold a folder or a Hub id)."""
    from ..models.catalogue import is_hub_id

    if model in ("", BUNDLED):
        return "bundled"
    if is_remote(model):
        return "remote"
    p = Path(model).expanduser()
    if p.is_dir():
        return "hf_dir"
    if not p.exists() and is_hub_id(model):
        return "hub"
    return "gguf"


def is_remote(model: str) -> bool:
    """A model on a server: ``https://host:port/v1#model-id`` (remote_model() makes one)."""
    return model.startswith(("http://", "https://"))


def remote_model(url: str, model_id: str) -> str:
    """The model string of ``model_id`` on the server at ``url``."""
    return f"{url}#{model_id}"


def split_remote(model: str) -> tuple[str, str | None]:
    """A remote model string as (server URL, model id; None: the server's first)."""
    url, _, mid = model.partition("#")
    return url, mid or None


def check_model_string(source: str, model: str) -> None:
    """Raise HearthError when ``model`` cannot be a model of ``source`` by its spelling alone
    (a Hub id that is not one, a server URL that is not one); files are checked when read."""
    if source == "hub":
        from ..models.catalogue import is_hub_id

        if not is_hub_id(model):
            raise HearthError(f"{model!r} is not a Hub id (owner/name, owner/name:QUANT or owner/name/file.gguf)")
    elif source == "remote":
        from ..remote.transport import Endpoint

        Endpoint.parse(split_remote(model)[0])


def hub_is_gguf(spec: str) -> bool:
    """A Hub id that picks one GGUF file (``owner/repo:Q4_K_M``, ``owner/repo/file.gguf``)."""
    from ..models.catalogue import parse_hub_id

    _repo, filename, quant = parse_hub_id(spec)
    return bool(filename or quant)


def runs_gguf(source: str, model: str) -> bool:
    """True when the model is a GGUF file (llama.cpp by default), false for transformers checkpoints."""
    return source in ("bundled", "gguf") or (source == "hub" and hub_is_gguf(model))


def effective_backend(source: str, model: str, backend: str) -> str:
    """The backend a load will use: the chosen one, or the one the model's type calls for
    ("remote" for a model on a server: no backend of this machine runs it)."""
    if source == "remote":
        return "remote"
    if backend != "auto":
        return backend
    return "llama_cpp" if runs_gguf(source, model) else "hf"


# The fields where "let Hearth choose" exists; each holds AUTO or a fixed choice.
AUTO_FIELDS = ("backend", "quant", "context", "draft", "mmproj", "n_threads", "threads_poll", "gpu_layers",
               "kv_type", "prefix_cache")
# What a load is rather than what the user chose: settings files keep none of these.
NOT_SAVED = ("server_parallel", "prefix_cache", "n_batch", "cpu_only", "retry_after")


def _whole(v: Any, low: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


@dataclass(slots=True, frozen=True)
class LoadSpec:
    """One load as the user chose it; every field left on :data:`AUTO` is the plan's to fill in.

    This is also the planner's input (engine/sizing/search.py reads its fixed choices), so the
    choice the window shows is the one the plan keeps. ``server_parallel``: the local server's
    API sequences, planned beside the window's in the model's one context (0: no server).
    ``workers``: other machines whose devices take layers (a load with any runs in a child
    process). ``prefix_cache`` (bytes) and ``n_batch``: the planner's knobs no setting offers.
    ``cpu_only``: this once on the CPU, with the sentence that says why (a GPU failed or
    stopped the last run). ``retry_after``: a reply's out-of-memory message, so the load starts
    from the next smaller plan. None of those is a setting: :meth:`as_dict` leaves them out."""
    model: str = BUNDLED                  # "bundled", a .gguf path, a transformers folder or a Hub id
    source: str | None = None             # one of SOURCES; None: worked out from ``model`` when made
    backend: str | Auto = AUTO            # "llama_cpp" or "hf"; AUTO: the model's type decides
    quant: str | Auto = AUTO              # "none", "int8", "int4" (transformers; a GGUF carries its own)
    context: int | Auto = AUTO
    draft: str | Auto = AUTO              # "none", "ngram" or a draft GGUF path
    mmproj: str | Auto = AUTO             # a GGUF's vision projector: "none" or a path; AUTO: the one beside it
    n_threads: int | Auto = AUTO          # AUTO: the caller's choice (the window's thread option), else the backend's
    threads_poll: int | Auto = AUTO       # llama.cpp's poll level 0-100 on Hearth's own pool; AUTO: the caller's
    gpu_layers: Union[int, Literal["all"], Auto] = AUTO  # blocks on the GPU, or "all"
    kv_type: str | Auto = AUTO            # "f16", "q8_0", "q4_0"
    exactness: str = field(default_factory=default_exactness)  # one of engine.config.EXACTNESS
    workers: tuple[str, ...] = ()
    server_parallel: int = 0
    prefix_cache: int | Auto = AUTO
    n_batch: int = 512
    cpu_only: str | None = None
    retry_after: str | None = None

    def __post_init__(self) -> None:
        for name in AUTO_FIELDS:
            v = getattr(self, name)
            if v == AUTO:  # AUTO as text (a command line's "--draft auto") becomes the member itself
                object.__setattr__(self, name, AUTO)
            elif v is None:
                raise HearthError(f"{name}: None is not a choice; AUTO lets Hearth choose")
        if not _whole(self.server_parallel, 0):
            raise HearthError(f"server_parallel must be a whole number >= 0, got {self.server_parallel!r}")
        gl = self.gpu_layers
        if gl is not AUTO and gl != "all" and not _whole(gl, 0):
            raise HearthError(f"GPU layers must be a number or \"all\", got {gl!r}")
        for name, low in (("context", 1), ("n_threads", 1), ("threads_poll", 0), ("prefix_cache", 0)):
            v = getattr(self, name)
            if v is not AUTO and not _whole(v, low):
                raise HearthError(f"{name} must be AUTO or a whole number >= {low}, got {v!r}")
        if not isinstance(self.workers, tuple):  # a settings file's list
            object.__setattr__(self, "workers", tuple(self.workers or ()))
        if self.source is None and isinstance(self.model, str):
            # Worked out once, so that two specs for the same model compare equal.
            object.__setattr__(self, "source", infer_source(self.model or BUNDLED))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LoadSpec":
        """A load saved as a dict (a settings file's ``last_working``, the split child's ``--load``).
        "auto" is AUTO, and so is null (how files before version 5 wrote Auto); a key saved before a
        field existed means that field's default; keys this version does not know are ignored."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for k in AUTO_FIELDS:
            if k in kw and kw[k] is None:
                kw[k] = AUTO
        for k in ("exactness",):
            if kw.get(k) is None:
                kw.pop(k, None)  # null in an old file: the default, as a missing key
        return cls(**kw)

    def as_dict(self) -> dict[str, Any]:
        """The settings' part of this load as plain JSON data (AUTO as "auto")."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in NOT_SAVED}

    def plain(self) -> "LoadSpec":
        """The settings' own spec, without a retry's notes (out of memory, CPU only)."""
        return replace(self, cpu_only=None, retry_after=None)

    @property
    def model_source(self) -> str:
        """The source, worked out from the model when the spec does not say."""
        return self.source or infer_source(self.model or BUNDLED)

    @property
    def effective_backend(self) -> str:
        """"llama_cpp", "hf" or "remote": the chosen backend, or the one the model's type calls for."""
        backend = "auto" if self.backend is AUTO else self.backend
        return effective_backend(self.model_source, self.model or BUNDLED, backend)

    @property
    def plan_format(self) -> str | None:
        """"gguf" (llama.cpp) or "hf" (transformers): the planner that covers this load;
        None for a GGUF file run on transformers, or a server's model, which no planner covers."""
        backend = self.effective_backend
        if backend == "llama_cpp":
            return "gguf"
        if backend == "remote":
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
        """The engine's ModelRef for this spec, honouring the chosen source:
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


def or_auto(v: Any) -> Any:
    """A value a caller may leave out (a command line's flag not given, None) as a spec takes it: AUTO."""
    return AUTO if v is None else v


def chosen(v: Any, auto: Any = None) -> Any:
    """The other way: a spec's value as the planner and the config take it, ``auto`` where it is AUTO."""
    return auto if v is AUTO else v


def _plain(v: Any) -> Any:
    """A value as JSON keeps it: AUTO as "auto", a tuple as a list."""
    if v is AUTO:
        return str(v)
    return list(v) if isinstance(v, tuple) else v
