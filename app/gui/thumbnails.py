"""Lazy thumbnails: decoded in a worker, cached on disk and in a memory LRU.

The grid asks :meth:`ThumbnailProvider.pixmap` for the few rows it paints; a miss
queues the path and returns None (the delegate draws a placeholder). One drain
worker per pool thread pops the most recent requests first (what the user looks
at now), decodes with :func:`engine.imageio.load_image` at a small ``max_side``,
writes a JPEG to the disk cache and yields the image back; :attr:`ready` then
tells the models which row to repaint.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path

from PySide6.QtCore import QObject, QStandardPaths, QThreadPool, Signal
from PySide6.QtGui import QImage, QPixmap

from app.gui.workers import create_worker

__all__ = ["ThumbnailProvider", "array_to_qimage", "default_cache_dir"]

THUMB_SIDE = 256
MAX_PENDING = 400  # older requests are dropped: the user has scrolled past them


def array_to_qimage(arr) -> QImage:
    """(H, W, 3) uint8 RGB or (H, W) uint8 gray array -> an independent QImage copy."""
    import numpy as np

    a = np.ascontiguousarray(arr)
    if a.ndim == 2:
        h, w = a.shape
        img = QImage(a.data, w, h, a.strides[0], QImage.Format.Format_Grayscale8)
    elif a.ndim == 3 and a.shape[2] == 3:
        h, w, _ = a.shape
        img = QImage(a.data, w, h, a.strides[0], QImage.Format.Format_RGB888)
    else:
        raise ValueError(f"arr must be (H, W) or (H, W, 3) uint8, got shape {a.shape}")
    return img.copy()  # detach from the numpy buffer


def default_cache_dir() -> Path:
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.CacheLocation)
    return Path(base or Path.home() / ".cache" / "simile") / "thumbnails"


def _cache_key(path: str, side: int) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    raw = f"{os.path.abspath(path)}|{st.st_mtime_ns}|{st.st_size}|{side}"
    return hashlib.sha1(raw.encode("utf-8", "surrogateescape")).hexdigest()


def _decode(path: str, side: int, cache_dir: Path | None) -> QImage | None:
    """Worker side: disk cache hit or decode + store. None if the file is unreadable.

    File I/O and JPEG coding go through Pillow, which releases the GIL while it
    works (QImage load/save would hold it and stall the GUI thread).
    """
    import numpy as np
    from PIL import Image

    key = _cache_key(path, side)
    if key is None:
        return None
    cached = cache_dir / key[:2] / f"{key}.jpg" if cache_dir is not None else None
    if cached is not None and cached.is_file():
        try:
            with Image.open(cached) as im:
                return array_to_qimage(np.asarray(im.convert("RGB")))
        except (OSError, ValueError):
            pass  # a damaged cache file: decode again
    from engine.io.imageio import load_image

    try:
        arr = load_image(path, max_side=side)
    except Exception:
        return None
    img = array_to_qimage(arr)
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".{threading.get_ident()}.tmp")
            Image.fromarray(np.ascontiguousarray(arr)).save(tmp, "JPEG", quality=88)
            os.replace(tmp, cached)
        except (OSError, ValueError):
            pass  # a read-only cache only costs speed
    return img


class ThumbnailProvider(QObject):
    """Memory-LRU + disk cache of thumbnails, filled by background workers.

    Parameters
    ----------
    cache_dir : Path, optional
        Folder for cached JPEGs (the collection's index dir or the user cache).
    side : int
        Longest side of a cached thumbnail, in pixels.
    memory_items : int
        Thumbnails kept in memory (least recently used dropped first).
    threads : int
        Decoding threads (a private pool, so thumbnails never wait behind indexing).
    """

    # path whose thumbnail just arrived (or failed); an object, not a str: Qt would drop
    # the undecodable bytes of a file name and the path would match no photo
    ready = Signal(object)

    def __init__(
        self,
        cache_dir: Path | None = None,
        *,
        side: int = THUMB_SIDE,
        memory_items: int = 1500,
        threads: int = 2,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.cache_dir = cache_dir
        self.side = side
        self.memory_items = memory_items
        self._lru: OrderedDict[str, QPixmap] = OrderedDict()
        self._failed: set[str] = set()
        self._pending: OrderedDict[str, None] = OrderedDict()
        self._inflight: set[str] = set()
        self._lock = threading.Lock()
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(max(1, threads))
        self._drainers = 0
        self._workers: list = []

    def set_cache_dir(self, cache_dir: Path | None) -> None:
        self.cache_dir = cache_dir

    # -- GUI side --------------------------------------------------------------------------
    def pixmap(self, path: str) -> QPixmap | None:
        """The cached thumbnail, or None after queueing it for decoding."""
        pm = self._lru.get(path)
        if pm is not None:
            self._lru.move_to_end(path)
            return pm
        if path not in self._failed:
            self.request(path)
        return None

    def is_failed(self, path: str) -> bool:
        return path in self._failed

    def request(self, path: str) -> None:
        with self._lock:
            if path in self._inflight:
                return
            self._pending.pop(path, None)
            self._pending[path] = None  # most recent last
            while len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)
        while self._drainers < self._pool.maxThreadCount():
            self._drainers += 1
            w = create_worker(
                self._drain,
                pool=self._pool,
                connect={"yielded": self._on_decoded, "finished": self._on_drainer_done},
            )
            self._workers.append(w)
            with self._lock:
                if not self._pending:
                    break

    def clear_pending(self) -> None:
        with self._lock:
            self._pending.clear()

    def is_idle(self) -> bool:
        with self._lock:
            return not self._pending and not self._inflight and self._drainers == 0

    def shutdown(self) -> None:
        self.clear_pending()
        for w in list(self._workers):
            w.quit()
        self._pool.waitForDone(5000)

    def _on_decoded(self, item: tuple[str, QImage | None]) -> None:
        path, img = item
        with self._lock:
            self._inflight.discard(path)
        if img is None:
            self._failed.add(path)
        else:
            self._lru[path] = QPixmap.fromImage(img)
            while len(self._lru) > self.memory_items:
                self._lru.popitem(last=False)
        self.ready.emit(path)

    def _on_drainer_done(self) -> None:
        self._drainers -= 1
        self._workers = [w for w in self._workers if w.is_running]
        with self._lock:
            more = bool(self._pending)
        if more and self._drainers == 0:
            # a request arrived between the last pop and the end of the drainer
            path = next(reversed(self._pending))
            self.request(path)

    # -- worker side -----------------------------------------------------------------------
    def _drain(self):
        side, cache_dir = self.side, self.cache_dir
        while True:
            with self._lock:
                if not self._pending:
                    return
                path, _ = self._pending.popitem(last=True)
                self._inflight.add(path)
            yield path, _decode(path, side, cache_dir)
