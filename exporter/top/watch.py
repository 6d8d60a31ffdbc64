"""--watch: the table redrawn in place every N seconds, as `watch` and `top` do, until Ctrl+C."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Callable, TextIO

from exporter.top.errors import TopSourceError

HOME, CLEAR_LINE, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"
CLEAR_SCREEN, HIDE_CURSOR, SHOW_CURSOR = "\x1b[2J", "\x1b[?25l", "\x1b[?25h"


def frame(title: str, body: str) -> str:
    """One screen: the cursor home, each line over the last frame's (the rest of it wiped), and below."""
    lines = [title, ""] + body.rstrip("\n").split("\n")
    return HOME + "".join(line + CLEAR_LINE + "\n" for line in lines) + CLEAR_BELOW


def watch(draw: Callable[[], str], seconds: float, out: TextIO, title: str,
          sleep: Callable[[float], None] = time.sleep, frames: int = 0) -> int:
    """Redraws until interrupted (or `frames` drawn, when not 0); a source that stops answering is shown
    in place, and the next frame tries again. The first frame's failure ends the command as without --watch."""
    drawn = 0
    out.write(CLEAR_SCREEN + HIDE_CURSOR)
    try:
        while True:
            started = time.monotonic()
            try:
                body = draw()
            except TopSourceError as exc:
                if not drawn:
                    raise
                body = f"error: {exc.message} (trying again in {seconds:g}s)\n"
            stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            out.write(frame(f"Every {seconds:g}s: {title}    {stamp}", body))
            out.flush()
            drawn += 1
            if frames and drawn >= frames:
                return 0
            sleep(max(0.0, seconds - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return 0
    finally:
        out.write(SHOW_CURSOR)
        out.flush()
