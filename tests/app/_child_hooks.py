"""Functions the GUI's indexing child runs first (``app.gui.indexer.CHILD_SETUP``), for
tests: the child is another process, so a test cannot monkeypatch the engine there.

Qt-free and light: the child imports this module.
"""

from __future__ import annotations

import errno


def full_disk_at_commit() -> None:
    """Emulate a disk that fills up just as the index commits its new search models and
    data (the write of ``states/MANIFEST.json``), through the engine's write hook
    (:data:`engine.index.files.WRITE_HOOK`)."""
    from engine.index import files
    from engine.index.manifest import MANIFEST_NAME

    def hook(where, path) -> None:
        if where == "before" and path.name == MANIFEST_NAME:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))

    files.WRITE_HOOK = hook
