"""Why a data directory cannot be used: one exception, its message the line the user sees."""

from __future__ import annotations

from store.errors import StoreMisconfigured


class DataDirRefused(StoreMisconfigured):
    """The data directory cannot be opened safely (in use, corrupt, newer, not a directory).

    The store does not start; the message names the directory and what to do.
    """
