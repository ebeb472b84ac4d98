"""Text to speech with a Piper voice (ONNX Runtime on the CPU, its own espeak-ng phonemizer)."""
from __future__ import annotations

import json
import threading

import numpy as np

from .models import SpeechModel

MIN_SPEED, MAX_SPEED = 0.25, 4.0   # OpenAI's range for /v1/audio/speech


class Voice:
    """A Piper voice, loaded once; ``speak`` is safe to call from several threads (one at a time)."""

    def __init__(self, model: SpeechModel, *, threads: int = 0, variation: bool = True) -> None:
        """``variation``: Piper's sampled pitch and timing noise, as its voices are trained to speak
        (False: none, so the same text always gives the same samples: the tests)."""
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        self.model = model
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(model.path), sess_options=options,
                                               providers=["CPUExecutionProvider"])
        config = json.loads(model.config_path.read_text(encoding="utf-8"))
        self._piper = PiperVoice(config=PiperConfig.from_dict(config), session=session)
        self.rate = int(self._piper.config.sample_rate)
        self._noise: float | None = None if variation else 0.0  # None: the voice's own noise scales
        self._lock = threading.Lock()

    def speak(self, text: str, *, speed: float = 1.0) -> np.ndarray:
        """``text`` spoken, as int16 mono samples at ``self.rate`` (empty for text with no words)."""
        from piper import SynthesisConfig

        speed = min(MAX_SPEED, max(MIN_SPEED, speed))
        config = SynthesisConfig(length_scale=1.0 / speed, noise_scale=self._noise, noise_w_scale=self._noise)
        with self._lock:
            chunks = [c.audio_int16_array for c in self._piper.synthesize(text, config)]
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
