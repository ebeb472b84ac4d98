"""Which files of a Hub repository to fetch: the model's weights (safetensors
unless pickles are allowed), its support files, and one GGUF quantization
(split GGUFs whole). Pure functions over file names; no network."""
from __future__ import annotations

import fnmatch
import re
from typing import Sequence

from ..errors import HearthError

# What a transformers model folder needs besides its weights. Python files are
# only fetched when remote code is allowed; pickled weights only when pickle is.
_SUPPORT_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt",
                  "tokenizer.model", "*.tiktoken", "chat_template.jinja", "chat_template.json",
                  "additional_chat_templates/*")
_SAFE_WEIGHTS = ("*.safetensors", "*.safetensors.index.json")
_PICKLE_WEIGHTS = ("*.bin", "*.bin.index.json", "*.pt", "*.pth", "*.ckpt")
_SPLIT_GGUF = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


class HubError(HearthError):
    """A download could not be done: unknown repo, no network and nothing cached, ..."""


def _match(name: str, patterns: tuple[str, ...]) -> bool:
    base = name.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(base, p) for p in patterns)


def select_model_files(names: list[str], *, allow_pickle: bool = False,
                       allow_remote_code: bool = False, repo_id: str = "") -> list[str]:
    """The files of a transformers repo that Hearth needs; refuses pickle-only repos."""
    top = [n for n in names if "/" not in n]  # transformers reads weights from the top level only
    weights = [n for n in top if _match(n, _SAFE_WEIGHTS)]
    if not any(n.endswith(".safetensors") for n in weights):
        pickled = [n for n in top if _match(n, _PICKLE_WEIGHTS)]
        if pickled and not allow_pickle:
            raise HubError(
                f"{repo_id} has only pickled PyTorch weights ({pickled[0]}); loading a pickle can run "
                "arbitrary code, so Hearth refuses it unless you allow pickled weights for this model")
        weights = pickled
    if not weights:
        ggufs = [n for n in names if n.endswith(".gguf")]
        hint = f"; it holds GGUF files, pick one as {repo_id}:QUANT (e.g. {quant_choices(ggufs)[0]})" \
            if ggufs else ""
        raise HubError(f"{repo_id} holds no model weights Hearth can load{hint}")
    support = [n for n in names if _match(n, _SUPPORT_FILES)
               and ("/" not in n or n.startswith("additional_chat_templates/"))]
    code = [n for n in top if n.endswith(".py")] if allow_remote_code else []
    return sorted(set(support + weights + code))


def quant_choices(ggufs: list[str]) -> list[str]:
    """Short labels of the GGUF files in a repo, for messages (the part after the last '.' or '-')."""
    out = []
    for n in ggufs:
        stem = _SPLIT_GGUF.sub(".gguf", n.rsplit("/", 1)[-1])[:-5]
        m = re.search(r"[.-]((?:I?Q|F|BF|q|f|bf)\d[\w]*)$", stem)
        out.append(m.group(1) if m else stem)
    return out or ["Q4_K_M"]


def projector_files(names: list[str], chosen: list[str]) -> list[str]:
    """The vision projector to fetch with ``chosen`` (a GGUF model's files), if the repo has one in
    the same folder: its file name is all the Hub says before a download, so it is picked by name
    (``mmproj`` in it; f16 first, the converter's default, then the shortest name). Once here the
    library checks its header and pairs it by its width (engine/models/projector.py)."""
    folder = chosen[0].rsplit("/", 1)[0] if chosen and "/" in chosen[0] else ""
    found = [n for n in names if n.endswith(".gguf") and "mmproj" in n.lower() and n not in chosen
             and (n.rsplit("/", 1)[0] if "/" in n else "") == folder]
    found.sort(key=lambda n: ("f16" not in n.lower() or "bf16" in n.lower(), len(n), n))
    return found[:1]


def select_gguf_files(names: list[str], *, filename: str | None, quant: str | None,
                      repo_id: str = "") -> list[str]:
    """The one GGUF file (or the shards of one split file) the user chose."""
    ggufs = [n for n in names if n.endswith(".gguf") and "mmproj" not in n.lower()]
    if filename:
        if filename not in names:
            raise HubError(f"{repo_id} has no file {filename}; it has: {', '.join(ggufs) or 'no GGUF files'}")
        chosen = [filename]
    else:
        q = (quant or "").lower()
        hits = [n for n in ggufs if re.search(rf"(^|[.\-_/]){re.escape(q)}([.\-]|$)", n.lower())]
        groups = {_SPLIT_GGUF.sub("", n) for n in hits}
        if not hits or len(groups) > 1:
            what = "no" if not hits else "more than one"
            raise HubError(f"{repo_id} has {what} GGUF file matching {quant!r}; choose one of: "
                           f"{', '.join(ggufs) or '(none)'}")
        chosen = hits
    m = _SPLIT_GGUF.search(chosen[0])
    if m and len(chosen) == 1:  # a split file: every shard is needed
        prefix = _SPLIT_GGUF.sub("", chosen[0])
        chosen = [n for n in ggufs if _SPLIT_GGUF.sub("", n) == prefix]
    return sorted(chosen)


def select_named_files(names: list[str], files: Sequence[str], repo_id: str = "") -> list[str]:
    """Exactly ``files`` (a speech model's), each of which the repository must have; a name ending in
    ``?`` is taken where the repository has it."""
    lacking = [f for f in files if not f.endswith("?") and f not in names]
    if lacking:
        raise HubError(f"{repo_id} has no file {lacking[0]}; is it the model you meant?")
    return [f.rstrip("?") for f in files if f.rstrip("?") in names]
