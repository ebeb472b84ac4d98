"""Take the documentation's pictures of images in a chat: two images waiting in the message box, then the
conversation with their thumbnails and the streamed reply.

    .venv/bin/python scripts/image_screenshots.py   # offscreen: assets/images-*.png

All real: the window, and a vision GGUF with its projector that tests/vlm_model.py builds with
llama.cpp's own converter (the bundled SmolLM2 as its text model, a random-weight vision tower:
no vision model can be downloaded here, so what it says about the pictures is SmolLM2 guessing).
The pictures are drawn with Pillow. Everything happens in a scratch data folder deleted afterwards.
"""
from __future__ import annotations

import io
import sys
from pathlib import Path


def _drawing(kind: str) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (480, 320), (135, 190, 235))
    d = ImageDraw.Draw(img)
    d.rectangle((0, 230, 480, 320), fill=(90, 160, 80))
    if kind == "house":
        d.ellipse((370, 30, 440, 100), fill=(250, 210, 60))
        d.rectangle((150, 140, 310, 260), fill=(200, 80, 60))
        d.polygon([(130, 145), (230, 70), (330, 145)], fill=(120, 60, 40))
        d.rectangle((210, 190, 250, 260), fill=(90, 50, 30))
    else:
        for x in (80, 240, 400):
            d.rectangle((x - 8, 170, x + 8, 250), fill=(110, 70, 40))
            d.ellipse((x - 50, 90, x + 50, 190), fill=(40, 120, 50))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def take(out: Path, scratch: Path, theme: str, _args) -> None:
    from app.core.settings import Settings
    from app.window.selftest import wait_until
    from engine.models.catalogue import bundled_model_path
    from offscreen_pictures import open_window
    from vlm_model import build

    model, mmproj = build(bundled_model_path())
    folder = scratch / "models"
    folder.mkdir()
    for f in (model, mmproj):
        (folder / f.name).symlink_to(f)
    s = Settings(theme=theme, model=str(folder / model.name), draft="none", context=4096)
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 40})
    win = open_window(s)
    suffix = "-dark" if theme == "dark" else ""
    tray = win.chat.attach
    for name in ("house", "trees"):
        (scratch / f"{name}.png").write_bytes(_drawing(name))
    tray.add_paths([str(scratch / "house.png"), str(scratch / "trees.png")])
    if not wait_until(lambda: len(tray.image_tokens) == 2, 60.0):
        raise RuntimeError("the images were not counted: " + " | ".join(win.info.messages()))
    win.chat.set_input_text("Which of these two pictures has a house in it?")
    wait_until(lambda: False, 0.5)
    win.grab().save(str(out / f"images-attached{suffix}.png"))
    win.chat._submit()
    if win.stream is None or not wait_until(lambda: win.stream is None, 600.0):
        raise RuntimeError("no reply: " + " | ".join(win.info.messages()))
    win.rename_conversation(win.current, "Two pictures")
    wait_until(lambda: False, 0.5)
    win.grab().save(str(out / f"images-reply{suffix}.png"))
    win.close()


def main() -> int:
    from offscreen_pictures import take_pictures

    return take_pictures(__doc__ or "", take, prefix="hearth-image-pictures-")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
