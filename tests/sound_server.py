"""A private PulseAudio server for the voice tests: a room to speak into and a speaker to listen to.

There is no sound card here, so the tests run the real sound server with two
null sinks: ``room``, whose monitor is remapped into a source named ``mic`` (the
default input, a microphone as QtMultimedia sees one), and ``speaker`` (the
default output). ``say`` plays a file into the room, so the window's microphone
hears it; ``listen`` records what the window sends to the speaker. The server is
started once per test session, before Qt first asks for audio devices, on a
socket in a temporary folder (PULSE_SERVER points Qt there, never at a real
server on a developer's machine). scripts/test.sh installs pulseaudio.
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ROOM_RATE, SPEAKER_RATE = 16000, 22050
_CONFIG = """\
load-module module-native-protocol-unix auth-anonymous=1 socket={socket}
load-module module-null-sink sink_name=room rate={room} channels=1
load-module module-null-sink sink_name=speaker rate={speaker} channels=1
load-module module-remap-source master=room.monitor source_name=mic source_properties=device.description=TestMic
set-default-sink speaker
set-default-source mic
"""


class SoundServer:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="hearth-pulse-"))
        self.socket = self.folder / "native"
        self.proc: subprocess.Popen | None = None
        self.hum: subprocess.Popen | None = None
        self.missing = shutil.which("pulseaudio") is None or shutil.which("paplay") is None

    @property
    def env(self) -> dict[str, str]:
        return {"PULSE_SERVER": f"unix:{self.socket}", "PULSE_RUNTIME_PATH": str(self.folder),
                "PULSE_STATE_PATH": str(self.folder), "PULSE_COOKIE": str(self.folder / "cookie")}

    def start(self) -> None:
        (self.folder / "default.pa").write_text(_CONFIG.format(socket=self.socket, room=ROOM_RATE,
                                                               speaker=SPEAKER_RATE))
        env = {**os.environ, **self.env, "HOME": str(self.folder)}
        self.proc = subprocess.Popen(
            ["pulseaudio", "-n", "-F", str(self.folder / "default.pa"), "--daemonize=no", "--exit-idle-time=-1",
             "--disallow-exit", "--system=false", "--disable-shm=yes", "--log-target=file:" + str(self.folder / "log")],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if subprocess.run(["pactl", "info"], env=env, capture_output=True).returncode == 0:
                # A room is never digitally silent to a microphone: a real one hands over samples all the
                # time, silence included. An idle null sink's monitor hands over none, so silence plays in.
                with open("/dev/zero", "rb") as zero:
                    self.hum = subprocess.Popen(["pacat", "--playback", "-d", "room", "--raw", "--format=s16le",
                                                 f"--rate={ROOM_RATE}", "--channels=1"], env=env, stdin=zero,
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                return
            time.sleep(0.05)
        raise RuntimeError(f"pulseaudio did not start; its log: {(self.folder / 'log').read_text()[-2000:]}")

    def say(self, wav: Path) -> subprocess.Popen:
        """Play ``wav`` into the room (the microphone hears it); returns the player."""
        return subprocess.Popen(["paplay", "-d", "room", str(wav)], env={**os.environ, **self.env},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def listen(self, out: Path) -> subprocess.Popen:
        """Record what goes to the speaker into ``out`` (raw 16-bit mono at SPEAKER_RATE): a file, not a
        pipe, whose 64 KiB would fill in 1.5 s and stall the recorder."""
        with open(out, "wb") as f:
            return subprocess.Popen(["parec", "-d", "speaker.monitor", "--raw", "--format=s16le", "--channels=1",
                                     f"--rate={SPEAKER_RATE}", "--latency-msec=20"],
                                    env={**os.environ, **self.env}, stdout=f, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.hum is not None and self.hum.poll() is None:
            self.hum.kill()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_for_session() -> SoundServer:
    """Started by conftest before any test: Qt asks for devices once, and must find this server."""
    server = SoundServer()
    os.environ.update(server.env)
    if not server.missing:
        server.start()
        atexit.register(server.stop)
    return server
