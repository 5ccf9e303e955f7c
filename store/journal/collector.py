"""The garbage collector paused while a load builds objects, counted across pausers.

A restart makes millions of objects and no cycles, and each collection
meanwhile walks all of them again (restoring a million jobs took twice as
long with it running; run on the loader's thread, a full collection holds
the GIL for a second, so the event loop answers nothing meanwhile). Several
parts pause it (the journal from its open until the finished records are
in, `serve` until it has frozen what the open loaded): it runs again when
the last of them resumes, if it ran when the first paused. A process of its
own (`serve`) asks `freeze_at_resume`: what the loads built lives as long
as the process, so the last resume freezes it out of the collector's sight
(else the first full collections would each walk every loaded job).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_pauses = 0
_was_enabled = False
_freeze = False


def freeze_at_resume() -> None:
    global _freeze
    _freeze = True


def pause() -> None:
    global _pauses, _was_enabled
    if _pauses == 0:
        _was_enabled = gc.isenabled()
        gc.disable()
    _pauses += 1


def resume() -> None:
    global _pauses
    if _pauses == 0:
        return
    _pauses -= 1
    if _pauses == 0:
        if _freeze:
            gc.freeze()
        if _was_enabled:
            gc.enable()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    pause()
    try:
        yield
    finally:
        resume()
