"""Fault-injection harness (reliability issue, point 8): many seeded faults per family.

Usage::

    python tests/benchmarks/fault_harness.py --scale 1 [--seed 0] [--families kills,cli]
        [--workdir DIR] [--keep]

``--scale 1`` (720 odd files, 20 kills, every write of every writer, 128 damaged files,
...: :data:`FAMILIES`) takes about a quarter of an hour on two cores; ``--scale 0.1`` a
few minutes. Linux only (``/proc``, FIFOs, sockets); the real full disk (a tmpfs) and the
read-only media (a bind mount) need root and mount rights, and are skipped without them.

Every family is a function ``family(n_cases, seed, workdir) -> Outcome`` (``tried``,
``survived``, ``failures``: one text per failed case with what happened and any
traceback; ``notes``: counts of how the cases went). ``tests/test_fault_injection.py``
runs each with 1-3 cases in the default test run; this script runs them with many and
prints the markdown table ``family | tried | survived | notes`` and the failures.

The promises checked (on a tiny folder of half-size demo photos):

- one bad file never stops indexing: it is reported with a reason, everything else is
  indexed (:func:`broken_images`);
- a crash at any instant (a ``kill -9`` of the indexer, an exception or ``os._exit`` at
  any write of an update, a grouping or a learned model) leaves an index that opens and
  answers, from the old or the new version, never a mix, and the next run completes it
  into what an uninterrupted run gives (:func:`kills`, :func:`crashes`); no worker
  process outlives a killed indexer;
- a damaged index file gives one line naming the file and the remedy, and
  ``simile index --repair`` gives the answers of a clean build (:func:`corruption`);
- readers during updates never fail nor see two versions mixed (:func:`concurrency`);
- a full disk is one line, exit status 1, and the previous version stays
  (:func:`disk_full`, simulated at every write and on a real small tmpfs);
- on read-only media queries answer and writers say, in one line, that they cannot
  write (:func:`read_only`);
- nothing outside Simile's own files is ever deleted (checked after every run that
  writes);
- a bad command line is one error line (plus at most a hint), exit status 2
  (:func:`bad_command_lines`);
- nothing hangs (every subprocess has a deadline).

Crashes are injected with the store's write hook (``engine.index.files.WRITE_HOOK``): an
exception (a ``BaseException``, so no ``except Exception`` can swallow it; the clean-up
handlers run, as after a failed write) before or after the k-th file write, or
``os._exit`` after it in a child process (nothing runs: a ``kill -9`` at that instant).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import os
import queue
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

DEMO = ROOT / "assets" / "demo"
TINY = ("astronaut", "brick", "coffee", "camera", "chelsea", "rocket")
MORE = (
    "astronaut_crop",
    "brick_crop",
    "coffee_light",
    "camera_crop",
    "chelsea_crop",
    "rocket_crop",
    "coins",
)
METHODS = ("vocabulary", "uniform", "wta", "hybrid")
#: a subprocess taking longer than this (seconds) is a hang
DEADLINE = 300.0
IMAGE_SUFFIXES = (
    ".jpg",
    ".jpeg",
    ".png",
    ".heic",
    ".heif",
    ".tif",
    ".tiff",
    ".webp",
    ".gif",
    ".bmp",
    ".cr2",
    ".nef",
    ".dng",
    ".avif",
    ".jxl",
)


class Outcome(NamedTuple):
    """What a family function returns."""

    tried: int
    survived: int
    failures: list[str]
    notes: Sequence[str] = ()


class Crash(BaseException):
    """What the write hook raises: the program stops at that write (a BaseException, so
    that no ``except Exception`` handler can swallow it)."""


class Tally:
    """Counts the cases of a family: each case returns its problems (empty: survived)."""

    def __init__(self) -> None:
        self.tried = 0
        self.survived = 0
        self.failures: list[str] = []
        self.notes: Counter[str] = Counter()  # how the cases went: counted
        self.info: list[str] = []  # facts about the family (printed as they are)

    def case(self, name: str, fn: Callable[[], list[str]]) -> bool:
        self.tried += 1
        try:
            problems = fn()
        except Exception:
            problems = ["unexpected exception in the check:\n" + _tail(traceback.format_exc())]
        if problems:
            self.failures.append(f"[{name}] " + "\n    ".join(problems))
            return False
        self.survived += 1
        return True

    def outcome(self) -> Outcome:
        notes = self.info + [f"{k}: {v}" for k, v in sorted(self.notes.items())]
        return Outcome(self.tried, self.survived, self.failures, notes)


def _tail(text: str, lines: int = 30) -> str:
    parts = text.rstrip().splitlines()
    return "\n".join(parts[-lines:])


# ============================================================== photos and folders
_HALF: dict[str, Path] = {}


def half_photos(workdir: Path) -> Path:
    """Half-size copies of every demo photo (made once per workdir)."""
    key = str(workdir)
    if key in _HALF:
        return _HALF[key]
    import cv2

    out = workdir / "_half"
    if not (out / ".done").exists():
        out.mkdir(parents=True, exist_ok=True)
        for src in sorted(DEMO.glob("*.jpg")):
            img = cv2.imread(str(src))
            cv2.imwrite(str(out / src.name), cv2.resize(img, None, fx=0.5, fy=0.5))
        (out / ".done").write_text("")
    _HALF[key] = out
    return out


def all_names(workdir: Path) -> list[str]:
    return sorted(p.stem for p in half_photos(workdir).glob("*.jpg"))


def put(workdir: Path, folder: Path, names: Sequence[str], sub: str = "") -> None:
    """Copy half-size photos ``names`` into ``folder`` (or its subfolder ``sub``)."""
    src = half_photos(workdir)
    dst = folder / sub if sub else folder
    dst.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(src / f"{n}.jpg", dst / f"{n}.jpg")


def fresh(path: Path) -> Path:
    if path.exists() or path.is_symlink():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def user_files(folder: Path) -> dict[bytes, tuple[int, int]]:
    """Every entry of ``folder`` outside the index (``.simile``): name -> (size, mtime)."""
    out = {}
    root = os.fsencode(folder)
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root and b".simile" in dirnames:
            dirnames.remove(b".simile")
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


def untouched(before: dict, folder: Path) -> list[str]:
    after = user_files(folder)
    lost = sorted(set(before) - set(after))
    changed = sorted(k for k in before if k in after and after[k] != before[k])
    out = []
    if lost:
        out.append(f"files outside the index were DELETED: {lost[:5]}")
    if changed:
        out.append(f"files outside the index were changed: {changed[:5]}")
    return out


def index_dir(folder: Path) -> Path:
    return folder / ".simile"


def backup(folder: Path, to: Path) -> None:
    if to.exists():
        shutil.rmtree(to)
    shutil.copytree(index_dir(folder), to, symlinks=True)


def restore(folder: Path, frm: Path) -> None:
    if index_dir(folder).exists():
        shutil.rmtree(index_dir(folder))
    shutil.copytree(frm, index_dir(folder), symlinks=True)


def orphans(folder: Path) -> list[str]:
    """Files of the index that no version names (temporary files, unnamed states)."""
    from engine.index.files import TMP_RE
    from engine.index.manifest import MANIFEST_NAME, read_snapshot

    idx = index_dir(folder)
    out = []
    for dirpath, _dirs, files in os.walk(idx):
        out += [os.path.join(dirpath, f) for f in files if TMP_RE.match(f)]
    states = idx / "states"
    if states.is_dir():
        named = read_snapshot(states).files() | {MANIFEST_NAME}
        out += [f"states/{f}" for f in os.listdir(states) if f not in named]
    return out


# ============================================================== running the command
class Run(NamedTuple):
    code: int | None  # None: a traceback (in-process) or a hang (subprocess)
    out: str
    err: str
    seconds: float


def cli(*argv: Any) -> Run:
    """``simile ARGV`` in this process (``app.cli.main``); an exception escaping it (a
    traceback) gives ``code=None`` with the traceback in ``err``. :class:`Crash`
    propagates."""
    from app.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([os.fspath(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:
            err.write(traceback.format_exc())
            code = None
    return Run(code, out.getvalue(), err.getvalue(), time.monotonic() - t0)


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.setdefault("QT_QPA_PLATFORM", "offscreen")
    e["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
    return e


def cli_proc(
    *argv: Any,
    timeout: float = DEADLINE,
    script: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> Run:
    """``python -m app ARGV`` (or ``python -c script ARGV``) in a child process; a run
    past ``timeout`` is killed and reported as a hang (``code=None``)."""
    head = ["-c", script] if script else ["-m", "app"]
    cmd = [sys.executable, *head, *[os.fsencode(a) for a in argv]]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**env(), **(extra_env or {})},
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
        err += f"\n[HANG: killed after {timeout:.0f} s]".encode()
    dec = lambda b: b.decode("utf-8", "replace")  # noqa: E731
    return Run(code, dec(out), dec(err), time.monotonic() - t0)


ERROR_LINE = re.compile(r"^simile( [a-z]+)?: error: \S")


def one_line_error(run: Run, code: int | Sequence[int] | None = None) -> list[str]:
    """Problems unless ``run`` failed with one error line (plus at most the hint of the
    argument parser) and exit status ``code`` (any non-zero when None)."""
    lines = [ln for ln in run.err.splitlines() if ln.strip()]
    problems = []
    codes = (code,) if isinstance(code, int) else code
    if run.code is None:
        problems.append("traceback or hang")
    elif run.code == 0:
        problems.append("exit status 0 (the error was not reported)")
    elif codes is not None and run.code not in codes:
        problems.append(f"exit status {run.code}, expected {codes}")
    if "Traceback" in run.err or "Traceback" in run.out:
        problems.append("a traceback was printed")
    if not lines or not ERROR_LINE.match(lines[0]):
        problems.append("no 'simile: error: ...' line")
    extra = lines[1:]
    if extra and not (len(extra) == 1 and extra[0].startswith("(see '")):
        problems.append(f"{len(lines)} stderr lines, not one")
    if problems:
        problems.append(f"stderr: {_tail(run.err, 12)!r}")
    return problems


def ok_run(run: Run, what: str) -> list[str]:
    if run.code == 0 and "Traceback" not in run.err:
        return []
    return [f"{what}: exit status {run.code}: {_tail(run.err, 25)}"]


def last_json(text: str) -> Any:
    return json.loads(text.strip().splitlines()[-1])


# ============================================================== states and answers
def read_states(folder: Path, names: Sequence[str]) -> dict[str, dict | None]:
    """States ``names`` of the current version (None: absent), read from one version."""
    from engine.index.store import IndexStore

    with IndexStore.open(index_dir(folder), readonly=True) as s:
        snap = s.snapshot()
        present = [n for n in names if snap.has(n)]
        _, got = s.load_version(present)
    return {n: got.get(n) for n in names}


def same_value(v: Any, w: Any) -> bool:
    if isinstance(v, np.ndarray) or isinstance(w, np.ndarray):
        if not (isinstance(v, np.ndarray) and isinstance(w, np.ndarray)):
            return False
        if v.dtype != w.dtype or v.shape != w.shape:
            return False
        if v.dtype.kind in "fc":
            return bool(np.array_equal(v, w, equal_nan=True))
        return bool(np.array_equal(v, w))
    if isinstance(v, float) and isinstance(w, float) and v != v and w != w:
        return True
    if isinstance(v, dict) and isinstance(w, dict):  # (a segment of a segmented state)
        return same_state(v, w)
    if isinstance(v, list) and isinstance(w, list):
        return len(v) == len(w) and all(same_value(x, y) for x, y in zip(v, w, strict=True))
    return v == w


def same_state(a: dict | None, b: dict | None, ignore: Sequence[str] = ()) -> bool:
    if a is None or b is None:
        return a is None and b is None
    ka, kb = set(a) - set(ignore), set(b) - set(ignore)
    return ka == kb and all(same_value(a[k], b[k]) for k in ka)


def same_version(a: dict, b: dict, ignore: dict[str, Sequence[str]] | None = None) -> bool:
    ignore = ignore or {}
    return set(a) == set(b) and all(same_state(a[k], b[k], ignore.get(k, ())) for k in a)


def _rel(path: Any, folder: Path) -> str:
    return os.fsdecode(os.path.relpath(os.fsencode(path), os.fsencode(folder)))


def answers(
    folder: Path, queries: Sequence[str], methods: Sequence[str] = METHODS, top: int = 50
) -> dict:
    """Every hit (relative path, score) of each query and method, by name."""
    import engine.workflows.feedback  # noqa: F401  (registers "learned")
    from engine.collection import Collection

    out = {}
    real = Path(os.path.realpath(folder))
    with Collection.open(folder, readonly=True) as col:
        for q in queries:
            for m in methods:
                hits = col.query(folder / q, method=m, top=top)
                out[q, m] = sorted((_rel(h.path, real), float(h.score)) for h in hits)
    return out


def same_answers(a: dict, b: dict, tol: float = 1e-9) -> bool:
    if set(a) != set(b):
        return False
    for k in a:
        if [n for n, _ in a[k]] != [n for n, _ in b[k]]:
            return False
        if any(
            abs(x - y) > tol * max(1.0, abs(x)) for (_, x), (_, y) in zip(a[k], b[k], strict=True)
        ):
            return False
    return True


def diff_answers(a: dict, b: dict) -> str:
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b or not same_answers({k: a[k]}, {k: b[k]}):
            return f"{k}: {a.get(k, '-')[:4]} vs {b.get(k, '-')[:4]}"
    return "(same)"


def searcher_consistent(folder: Path) -> list[str]:
    """The reader's search models and data were made together, and a photo's best
    match is itself."""
    from engine.collection import Collection
    from engine.index.encode import compatible

    with Collection.open(folder, readonly=True) as col:
        paths = col.paths()
        if not paths:
            return []
        if not compatible(*col.searcher.ensure()):
            return ["the reader's search models and data do not belong together (a mix)"]
        q = Path(sorted(paths)[0])
        hits = col.query(q, method="vocabulary", top=1)
        if not hits or Path(hits[0].path).name != q.name:
            return [f"query {q.name}: best hit {hits[:1]}, not itself"]
    return []


# ============================================================== 1. broken images
@dataclass
class Entry:
    rel: bytes  # path relative to the folder
    kind: str
    expect: frozenset  # of "ok", "failed", "skipped", "ignored"


def _png(width: int, height: int, chunks: Sequence[tuple[bytes, bytes]] = ()) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(tag + data)
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    body = b"".join(chunk(t, d) for t, d in chunks)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + body + chunk(b"IEND", b"")


_BOMB: dict[str, bytes] = {}


def _real_png_bomb() -> bytes:
    """A valid 20000 x 20000 grey PNG of ~400 kB (400 MB of pixels once decoded)."""
    if "png" not in _BOMB:
        side = 20000
        comp = zlib.compressobj(9)
        row = b"\x00" * (side + 1)
        parts = [comp.compress(row * 500) for _ in range(side // 500)]
        parts.append(comp.flush())
        _BOMB["png"] = _png(side, side, [(b"IDAT", b"".join(parts))])
    return _BOMB["png"]


def _gif_header(w: int, h: int) -> bytes:
    return (
        b"GIF89a"
        + struct.pack("<HHBBB", w, h, 0, 0, 0)
        + b",\x00\x00\x00\x00"
        + (struct.pack("<HH", w, h) + b"\x00\x02\x02\x44\x01\x00;")
    )


def _jpeg_header(w: int, h: int) -> bytes:
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, h, w, 1) + b"\x01\x11\x00"
    return (
        b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
        + sof
        + (b"\xff\xd9")
    )


def _bmp_header(w: int, h: int) -> bytes:
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 54 + 64, 0, 0, 54) + info + b"\x00" * 64


_FORMATS: dict[tuple[str, str], bytes] = {}


def _encoded(workdir: Path, name: str, fmt: str) -> bytes:
    """Demo photo ``name`` (half size) encoded as ``fmt``."""
    key = (name, fmt)
    if key not in _FORMATS:
        from PIL import Image

        src = half_photos(workdir) / f"{name}.jpg"
        if fmt == "jpeg":
            _FORMATS[key] = src.read_bytes()
        else:
            im = Image.open(src)
            im.load()
            buf = io.BytesIO()
            if fmt == "heic":
                import pillow_heif

                pillow_heif.register_heif_opener()
                im.save(buf, format="HEIF", quality=80)
            elif fmt == "cmyk":
                im.convert("CMYK").save(buf, format="JPEG")
            elif fmt == "png16":
                arr = np.asarray(im.convert("L"), dtype=np.uint16) * 257
                Image.fromarray(arr).save(buf, format="PNG")
            elif fmt == "gif":
                im.convert("P").save(buf, format="GIF")
            else:
                im.save(buf, format=fmt.upper())
            _FORMATS[key] = buf.getvalue()
    return _FORMATS[key]


def _heic_available() -> bool:
    try:
        import pillow_heif

        return bool(pillow_heif.libheif_info().get("encoders"))
    except Exception:
        return False


OK, FAILED, SKIPPED, IGNORED = "ok", "failed", "skipped", "ignored"


def _odd_entries(
    rng: random.Random, workdir: Path, folder: Path, kind: str, i: int, good: Sequence[str]
) -> list[Entry]:
    """Make the odd entry (or entries) of ``kind`` in ``folder``; what indexing should do
    with each."""
    root = os.fsencode(folder)
    photo = rng.choice(good)
    tag = f"{kind}_{i}".encode()

    def write(rel: bytes, data: bytes) -> bytes:
        with open(os.path.join(root, rel), "wb") as fh:
            fh.write(data)
        return rel

    def one(rel: bytes, data: bytes, *expect: str) -> list[Entry]:
        return [Entry(write(rel, data), kind, frozenset(expect))]

    suffix = rng.choice(IMAGE_SUFFIXES).encode()
    if kind == "truncated-jpeg":
        data = _encoded(workdir, photo, "jpeg")
        return one(tag + b".jpg", data[: rng.randint(2, len(data) * 9 // 10)], OK, FAILED)
    if kind == "truncated-png":
        data = _encoded(workdir, photo, "png")
        return one(tag + b".png", data[: rng.randint(8, len(data) * 9 // 10)], OK, FAILED)
    if kind == "truncated-heic":
        data = _encoded(workdir, photo, "heic")
        return one(tag + b".heic", data[: rng.randint(12, len(data) * 9 // 10)], OK, FAILED)
    if kind == "random-bytes":
        data = rng.randbytes(rng.randint(1, 60_000))
        return one(tag + suffix, data, FAILED)
    if kind == "magic-then-junk":
        magic = rng.choice(
            [
                b"\xff\xd8\xff\xe0",
                b"\x89PNG\r\n\x1a\n",
                b"GIF89a",
                b"II*\x00",
                b"MM\x00*",
                b"RIFF\x00\x10\x00\x00WEBPVP8 ",
                b"BM",
                b"\x00\x00\x00\x18ftypheic",
                b"\x00\x00\x00\x1cftypavif",
            ]
        )
        ext = rng.choice([suffix, b""])
        return one(tag + ext, magic + rng.randbytes(rng.randint(0, 5000)), FAILED)
    if kind == "header-bomb":
        w, h = rng.choice(
            [
                (65535, 65535),
                (2**31 - 1, 2**31 - 1),
                (100_000, 100_000),
                (1, 2**31 - 1),
                (20_000, 20_000),
            ]
        )
        which = rng.choice(["png", "gif", "jpeg", "bmp"])
        w, h = (min(w, 65535), min(h, 65535)) if which in ("gif", "jpeg") else (w, h)
        w, h = (w, h) if w * h > 200_000_000 else (65535, 65535)
        data = {"png": _png, "gif": _gif_header, "jpeg": _jpeg_header, "bmp": _bmp_header}[which](
            w, h
        )
        ext = {"png": b".png", "gif": b".gif", "jpeg": b".jpg", "bmp": b".bmp"}[which]
        return one(tag + ext, data, FAILED)
    if kind == "real-bomb":
        return one(tag + b".png", _real_png_bomb(), FAILED)
    if kind == "zero-dims":
        return one(tag + b".png", _png(0, rng.choice([0, 10])), FAILED)
    if kind == "zero-byte":
        return one(tag + suffix, b"", FAILED)
    if kind == "tiny-1x1":
        from PIL import Image

        buf = io.BytesIO()
        Image.new("L", (1, 1), 128).save(buf, format="PNG")
        return one(tag + b".png", buf.getvalue(), OK, FAILED)
    if kind == "huge-sparse":
        rel = tag + b".jpg"
        with open(os.path.join(root, rel), "wb") as fh:
            fh.write(b"\xff\xd8\xff\xe0")
            fh.truncate((1 << 30) + rng.randint(1, 1 << 20))  # > 1 GiB, no blocks
        return [Entry(rel, kind, frozenset({FAILED}))]
    if kind == "bad-crc-png":
        data = bytearray(_encoded(workdir, photo, "png"))
        at = rng.randint(60, len(data) - 20)
        data[at] ^= 0xFF
        return one(tag + b".png", bytes(data), OK, FAILED)
    if kind == "trailing-junk":
        return one(tag + b".jpg", _encoded(workdir, photo, "jpeg") + rng.randbytes(999), OK)
    if kind == "other-format":
        fmt = rng.choice(
            ["png", "bmp", "tiff", "webp", "gif", "cmyk", "png16"]
            + (["heic"] if _heic_available() else [])
        )
        ext = {"cmyk": "jpg", "png16": "png", "tiff": "tif"}.get(fmt, fmt).encode()
        return one(tag + b"." + ext, _encoded(workdir, photo, fmt), OK)
    if kind == "wrong-suffix":
        fmt, ext = rng.choice(
            [
                ("png", b".jpg"),
                ("jpeg", b".png"),
                ("jpeg", b".txt"),
                ("jpeg", b""),
                ("webp", b".jpeg"),
                ("jpeg", b".heic"),
            ]
        )
        return one(tag + ext, _encoded(workdir, photo, fmt), OK)
    if kind == "non-utf8-good":
        name = tag + b"_M\xfcnchen_\xff" + rng.choice([b".jpg", b".JPG", b""])
        if rng.random() < 0.5:
            sub = b"Fotos_\xe9t\xe9_" + tag
            os.mkdir(os.path.join(root, sub))
            name = sub + b"/" + name
        return one(name, _encoded(workdir, photo, "jpeg"), OK)
    if kind == "non-utf8-bad":
        return one(tag + b"_\xc3\x28\xa0.jpg", rng.randbytes(rng.randint(0, 3000)), FAILED)
    if kind == "fifo":
        rel = tag + rng.choice([b".jpg", b".png", b""])
        os.mkfifo(os.path.join(root, rel))
        expect = {SKIPPED} if rel.endswith((b".jpg", b".png")) else {SKIPPED, IGNORED}
        return [Entry(rel, kind, frozenset(expect))]
    if kind == "dangling-link":
        rel = tag + b".jpg"
        os.symlink(os.path.join(root, b"nowhere", tag + b".jpg"), os.path.join(root, rel))
        return [Entry(rel, kind, frozenset({SKIPPED}))]
    if kind == "looping-links":
        a, b = tag + b"_a.jpg", tag + b"_b.jpg"
        os.symlink(b, os.path.join(root, a))
        os.symlink(a, os.path.join(root, b))
        return [Entry(a, kind, frozenset({SKIPPED})), Entry(b, kind, frozenset({SKIPPED}))]
    if kind == "self-link":
        rel = tag + b".png"
        os.symlink(rel, os.path.join(root, rel))
        return [Entry(rel, kind, frozenset({SKIPPED}))]
    if kind == "device-link":
        rel = tag + b".jpg"
        os.symlink(
            rng.choice([b"/dev/zero", b"/dev/null", b"/dev/urandom"]), os.path.join(root, rel)
        )
        return [Entry(rel, kind, frozenset({SKIPPED}))]
    if kind == "socket":
        rel = tag + b".jpg"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(os.path.join(root, rel))
        except OSError:  # (a path too long for a socket: a FIFO instead)
            os.mkfifo(os.path.join(root, rel))
        finally:
            sock.close()
        return [Entry(rel, kind, frozenset({SKIPPED}))]
    if kind == "folder-loop-link":
        if rng.random() < 0.5:  # a link to the folder itself
            rel = tag + b"_loop"
            os.symlink(b".", os.path.join(root, rel))
        else:  # a link, in a subfolder, to its parent (the folder)
            os.makedirs(os.path.join(root, tag), exist_ok=True)
            rel = tag + b"/up"
            os.symlink(b"..", os.path.join(root, rel))
        return [Entry(rel, kind, frozenset({SKIPPED}))]
    if kind in ("outside-link", "duplicate-links"):
        # a photo outside the folder (a file of its own), linked to once, or twice: a
        # file reachable through two names is indexed once, the other name reported
        outside = folder.parent / f"{folder.name}_outside"
        outside.mkdir(exist_ok=True)
        target = os.fsencode(outside / f"{tag.decode()}.jpg")
        shutil.copy(half_photos(workdir) / f"{photo}.jpg", os.fsdecode(target))
        if kind == "outside-link":
            os.symlink(target, os.path.join(root, tag + b".jpg"))
            return [Entry(tag + b".jpg", kind, frozenset({OK}))]
        names = [tag + b"_1.jpg", tag + b"_2.jpg"]
        for rel in names:
            os.symlink(target, os.path.join(root, rel))
        return [Entry(rel, kind, frozenset({OK, SKIPPED})) for rel in names]
    if kind == "text-file":
        return one(tag + b".txt", b"hello, not a photo\n" * rng.randint(0, 50), IGNORED)
    if kind == "folder-named-jpg":
        rel = tag + b".jpg"
        os.mkdir(os.path.join(root, rel))
        return [Entry(rel, kind, frozenset({IGNORED}))]
    raise ValueError(kind)


#: kinds of odd entries and their weights (a sparse 1 GiB file costs a read of it)
ODD_KINDS = {
    "truncated-jpeg": 3,
    "truncated-png": 2,
    "truncated-heic": 2,
    "random-bytes": 3,
    "magic-then-junk": 3,
    "header-bomb": 3,
    "real-bomb": 1,
    "zero-dims": 1,
    "zero-byte": 2,
    "tiny-1x1": 1,
    "huge-sparse": 0.2,
    "bad-crc-png": 1,
    "trailing-junk": 1,
    "other-format": 2,
    "wrong-suffix": 2,
    "non-utf8-good": 2,
    "non-utf8-bad": 2,
    "fifo": 2,
    "dangling-link": 2,
    "looping-links": 1,
    "self-link": 1,
    "device-link": 1,
    "socket": 1,
    "folder-loop-link": 1,
    "outside-link": 1,
    "duplicate-links": 1,
    "text-file": 1,
    "folder-named-jpg": 1,
}


def _kind_sequence(rng: random.Random, n: int) -> list[str]:
    """``n`` kinds: every kind once (shuffled), then weighted draws."""
    kinds = [k for k in ODD_KINDS if k != "huge-sparse"]
    rng.shuffle(kinds)
    if n > len(kinds):
        names, weights = zip(*ODD_KINDS.items(), strict=True)
        kinds += rng.choices(names, weights, k=n - len(kinds))
    return kinds[:n]


def broken_images(
    n_cases: int, seed: int, workdir: Path, per_run: int = 14, kinds: Sequence[str] | None = None
) -> Outcome:
    """``n_cases`` odd entries (broken, odd or special files, odd names) mixed with good
    photos, ``per_run`` a folder; ``simile index --json`` (a child process: a hang is
    caught) must exit 0, index every good photo and report each odd entry as expected
    (indexed, failed with a reason or skipped with a reason), then run again cleanly.
    ``kinds``: the kinds of the entries (default: every kind once, then seeded draws)."""
    rng = random.Random(seed)
    tally = Tally()
    kinds = list(kinds) if kinds is not None else _kind_sequence(rng, n_cases)
    names = all_names(workdir)
    for run_no, start in enumerate(range(0, len(kinds), per_run)):
        batch = kinds[start : start + per_run]
        folder = fresh(workdir / f"broken{seed}_{run_no}")
        good = rng.sample(names, rng.randint(2, 4))
        put(workdir, folder, good[:-1])
        put(workdir, folder, good[-1:], sub="sub")
        entries = []
        for i, kind in enumerate(batch):
            entries.append((kind, _odd_entries(rng, workdir, folder, kind, i, good)))
        jobs = rng.choice(["1", "2"])
        before = user_files(folder)
        first = cli_proc("index", folder, "--json", "--jobs", jobs)
        second = cli_proc("index", folder, "--json", "--jobs", jobs)
        listing = _listing(folder, first)
        run_problems = ok_run(first, "first index") + ok_run(second, "second index")
        if isinstance(listing, str):
            run_problems.append(listing)
        else:
            for n in good:
                rel = (b"sub/" if n == good[-1] else b"") + f"{n}.jpg".encode()
                got = listing.get(rel, (IGNORED, ""))[0]
                if got != OK:
                    run_problems.append(f"good photo {rel!r} was {got}, not indexed")
            known = {e.rel for _, made in entries for e in made}
            known |= {(b"sub/" if n == good[-1] else b"") + f"{n}.jpg".encode() for n in good}
            stray = sorted(k for k in listing if k not in known)
            if stray:
                run_problems.append(f"entries nobody made were listed: {stray[:5]}")
            if not isinstance(second_json := _summary(second), str):
                if second_json["indexed"] or second_json["removed"]:
                    run_problems.append(f"second run not incremental: {second_json}")
        run_problems += untouched(before, folder)
        run_problems += _stray_files(folder)
        for kind, made in entries:
            for j, entry in enumerate(made):

                def check(
                    entry: Entry = entry, run_problems: list = run_problems, listing: Any = listing
                ) -> list[str]:
                    if run_problems:
                        return ["the run failed: " + "; ".join(run_problems)]
                    got, reason = listing.get(entry.rel, (IGNORED, ""))
                    if got not in entry.expect:
                        return [
                            f"{entry.rel!r}: {got} ({reason!r}), expected "
                            f"{'/'.join(sorted(entry.expect))}"
                        ]
                    if got in (FAILED, SKIPPED) and not reason.strip():
                        return [f"{entry.rel!r}: {got} without a reason"]
                    tally.notes[f"{entry.kind} -> {got}"] += 1
                    return []

                tally.case(f"run {run_no} jobs {jobs}: {kind} #{j} {entry.rel!r}", check)
        tally.notes["runs (folders indexed twice)"] += 1
    got = Counter()
    for note, n in tally.notes.items():
        if " -> " in note:
            got[note.rsplit(" -> ", 1)[1]] += n
    tally.info.append("entries " + ", ".join(f"{k}: {v}" for k, v in sorted(got.items())))
    return tally.outcome()


def _summary(run: Run) -> dict | str:
    try:
        return last_json(run.out)
    except (ValueError, IndexError):
        return f"no JSON summary: {run.out[-300:]!r}"


def _listing(folder: Path, run: Run) -> dict[bytes, tuple[str, str]] | str:
    """rel path -> (ok | failed | skipped, reason), from the summary and the catalogue."""
    from engine.index.store import IndexStore

    summary = _summary(run)
    if isinstance(summary, str):
        return summary
    root = os.fsencode(os.path.realpath(folder))
    out: dict[bytes, tuple[str, str]] = {}

    def rel(p: str) -> bytes:
        return os.path.relpath(os.fsencode(p), root)

    for what, items in ((FAILED, summary["failed"]), (SKIPPED, summary["skipped"])):
        for item in items:
            key = rel(item["path"])
            if key in out:
                return f"{key!r} listed twice: {out[key]} and {what}"
            out[key] = (what, item.get("reason") or "")
    with IndexStore.open(index_dir(folder), readonly=True) as s:
        for p in s.paths("ok"):
            key = rel(p)
            if key in out:
                return f"{key!r} indexed and also listed as {out[key][0]}"
            out[key] = (OK, "")
    return out


def _stray_files(folder: Path) -> list[str]:
    """Temporary files left in the index after a run that finished."""
    from engine.index.files import TMP_RE

    out = []
    for _dirpath, _dirs, files in os.walk(index_dir(folder)):
        out += [f for f in files if TMP_RE.match(f)]
    return [f"temporary files left in the index: {out[:3]}"] if out else []


# ============================================================== 2. kills of the indexer
def _group_members(pgid: int) -> dict[int, str]:
    """Live processes of process group ``pgid`` (Linux /proc): pid -> command line."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if fields[0] in (b"Z", b"X") or int(fields[2]) != pgid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                out[int(entry)] = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, IndexError, ValueError):
            continue
    return out


def _left_behind(pgid: int, seconds: float = 6.0) -> dict[int, str]:
    end = time.monotonic() + seconds
    while (left := _group_members(pgid)) and time.monotonic() < end:
        time.sleep(0.1)
    for pid in left:  # (the harness cleans up after a failure)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


@dataclass
class KillScenario:
    name: str
    folder: Path  # where it runs (the catalogue holds absolute paths: always the same)
    folder_names: list[str]  # photos in the folder when killed
    base: Path | None  # index to start from (None: a first index)
    new_answers: dict
    new_models: dict | None
    old_models: dict | None
    lines: int  # JSON lines of an uninterrupted run
    seconds: float  # its duration
    queries: list[str] = field(default_factory=list)


_KILL_SCENARIOS: dict[tuple[str, int, str], KillScenario] = {}
KILL_SCENARIOS = ("first index", "update")


def _kill_scenario(workdir: Path, n_photos: int, name: str) -> KillScenario:
    """A first index of ``n_photos`` photos, or an update that doubles a folder (the
    models are refitted), with what an uninterrupted run gives (made once)."""
    from engine.index.keys import MODELS_STATE

    key = (str(workdir), n_photos, name)
    if key in _KILL_SCENARIOS:
        return _KILL_SCENARIOS[key]
    names = all_names(workdir)[:n_photos]
    base_names = names[: n_photos // 2 - 1] if name == "update" else None
    ref = fresh(workdir / f"kill_{name.replace(' ', '_')}_{n_photos}")
    base = None
    old_models = None
    if base_names:
        put(workdir, ref, base_names)
        assert cli_proc("index", ref, "--jobs", "2").code == 0
        base = workdir / f"kill_base_{n_photos}.simile"
        backup(ref, base)
        old_models = read_states(ref, [MODELS_STATE])[MODELS_STATE]
    put(workdir, ref, names)
    run = cli_proc("index", ref, "--json", "--jobs", "2")
    assert run.code == 0, run.err
    queries = [f"{names[0]}.jpg", f"{names[-1]}.jpg"]
    _KILL_SCENARIOS[key] = KillScenario(
        name,
        ref,
        names,
        base,
        answers(ref, queries),
        read_states(ref, [MODELS_STATE])[MODELS_STATE],
        old_models,
        len(run.out.splitlines()),
        run.seconds,
        queries,
    )
    return _KILL_SCENARIOS[key]


def start_index(folder: Path, jobs: int) -> subprocess.Popen:
    """``simile index FOLDER --json --jobs N`` in a session of its own (its workers can be
    killed with it), JSON lines on a pipe."""
    cmd = [sys.executable, "-m", "app", "index", os.fspath(folder), "--json", "--jobs", str(jobs)]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=env(),
        start_new_session=True,
    )


def _run_and_kill(folder: Path, rng: random.Random, sc: KillScenario) -> tuple[str, int, Any]:
    """Start ``simile index --json --jobs 2`` and SIGKILL it (the main process only) after
    a seeded number of progress lines or a seeded time; returns (how, pgid, exit)."""
    proc = start_index(folder, 2)
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    if rng.random() < 0.5:
        target = rng.randint(1, max(1, sc.lines - 1))
        how = f"after progress line {target}/{sc.lines}"
        seen = 0
        deadline = time.monotonic() + DEADLINE
        while seen < target and time.monotonic() < deadline:
            try:
                item = lines.get(timeout=1)
            except queue.Empty:
                continue
            if item is None:
                break
            seen += 1
    else:
        delay = rng.uniform(0.3, max(0.5, sc.seconds * 0.95))
        how = f"after {delay:.2f} s (a clean run takes {sc.seconds:.1f} s)"
        time.sleep(delay)
    finished = proc.poll()
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(10)
    proc.stdout.close()
    return how, proc.pid, finished


def kills(
    n_cases: int,
    seed: int,
    workdir: Path,
    n_photos: int = 14,
    scenarios: Sequence[str] = KILL_SCENARIOS,
) -> Outcome:
    """SIGKILL ``simile index`` at seeded instants (a first index, and an update that
    refits the models): no worker is left, the index opens and answers (the old version,
    or nothing yet on a first index, never an error about damage), its models are the
    old or the new ones, and the next run gives the answers of an uninterrupted run."""
    from engine.index.keys import MODELS_STATE

    rng = random.Random(seed)
    tally = Tally()
    for case in range(n_cases):
        sc = _kill_scenario(workdir, n_photos, scenarios[case % len(scenarios)])

        def check(sc: KillScenario = sc) -> list[str]:
            problems = []
            folder = fresh(sc.folder)
            if sc.base is not None:
                restore(folder, sc.base)
            put(workdir, folder, sc.folder_names)
            before = user_files(folder)
            how, pgid, finished = _run_and_kill(folder, rng, sc)
            by = "a progress line" if how.startswith("after progress") else "a time"
            tally.notes[f"{sc.name}: killed at {by}"] += 1
            if finished is not None:
                tally.notes[f"{sc.name}: run had finished before the kill"] += 1
            left = _left_behind(pgid)
            if left:
                problems.append(f"processes left after the kill ({how}): {left}")
            q = cli("query", folder, folder / sc.queries[0], "--json", "--top", "3")
            if q.code == 0:
                tally.notes[f"{sc.name}: answered right after the kill"] += 1
                models = read_states(folder, [MODELS_STATE])[MODELS_STATE]
                if not (same_state(models, sc.new_models) or same_state(models, sc.old_models)):
                    problems.append("after the kill the models are neither old nor new")
                problems += searcher_consistent(folder)
            elif (
                sc.base is None
                and q.code == 2
                and not any(w in q.err for w in ("repair", "damaged", "missing"))
            ):
                tally.notes[f"{sc.name}: 'no index yet' right after the kill"] += 1
                problems += one_line_error(q, 2)
            else:
                problems.append(f"query after the kill ({how}) failed: " + _tail(q.err, 20))
            again = cli_proc("index", folder, "--jobs", "2")
            problems += ok_run(again, "the next run")
            if again.code == 0:
                got = answers(folder, sc.queries)
                if not same_answers(got, sc.new_answers):
                    problems.append(
                        "completed index answers differently from an uninterrupted run: "
                        + diff_answers(got, sc.new_answers)
                    )
                left_files = orphans(folder)
                if left_files:
                    problems.append(f"files no version names were left: {left_files[:4]}")
            problems += untouched(before, folder)
            if problems:
                problems.insert(0, f"killed {how}")
            return problems

        tally.case(f"{sc.name} kill #{case}", check)
    return tally.outcome()


# ============================================================== 3. crashes at every write
def _recording_hook(seen: list, lock: threading.Lock) -> Callable[[str, Path], None]:
    def hook(where: str, path: Path) -> None:
        if where == "after":
            with lock:
                seen.append(Path(path).name)

    return hook


def _crash_hook(stage: str, k: int, exc: BaseException) -> Callable[[str, Path], None]:
    """Raise ``exc`` at the k-th write: ``stage`` "before" it starts or "after" it is in
    place."""
    count = [0]
    lock = threading.Lock()

    def hook(where: str, path: Path) -> None:
        if where == stage:
            with lock:
                count[0] += 1
                hit = count[0] == k
            if hit:
                raise exc

    return hook


@contextlib.contextmanager
def write_hook(hook: Callable[[str, Path], None] | None):
    import engine.index.files as files

    old = files.WRITE_HOOK
    files.WRITE_HOOK = hook
    try:
        yield
    finally:
        files.WRITE_HOOK = old


EXIT_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import engine.index.files as files
    k, n = int(os.environ["SIMILE_FAULT_WRITE"]), [0]
    me = os.getpid()
    def hook(where, path):
        if where == "after" and os.getpid() == me:
            n[0] += 1
            if n[0] == k:
                os._exit(137)
    files.WRITE_HOOK = hook
    from app.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@dataclass(eq=False)
class Op:
    """A command that writes a new version, from a base index, with its readers."""

    name: str
    folder: Path
    base: Path  # backup of the base index
    argv: list[str]
    read: Callable[[Path], dict]  # the version as stored
    outputs: Callable[[Path], Any]  # what a reader gets from it (CLI output)
    ignore: dict[str, Sequence[str]]
    old: dict = field(default_factory=dict)
    new: dict = field(default_factory=dict)
    old_out: Any = None
    new_out: Any = None
    writes: list[str] = field(default_factory=list)
    # an update whose photos make the models due a refit commits them first, with the old
    # models, then the refit: that first commit is a version of its own
    mid: dict | None = None
    mid_out: Any = None


def _op_update(workdir: Path) -> Op:
    from engine.index.keys import DATA_STATE, MODELS_STATE

    folder = fresh(workdir / "op_update")
    put(workdir, folder, TINY)
    assert cli("index", folder, "--jobs", "1").code == 0
    put(workdir, folder, MORE)  # doubles the folder: the models are refitted

    def outputs(f: Path) -> Any:
        run = cli("query", f, f / "brick.jpg", "--json", "--top", "20", "--method", "vocabulary")
        if run.code != 0:
            return ("error", run.err)
        hits = last_json(run.out)["results"][0]["hits"]
        return [(Path(h["path"]).name, round(h["score"], 9)) for h in hits]

    return Op(
        "update",
        folder,
        workdir / "op_update.base",
        ["index", str(folder), "--jobs", "1"],
        lambda f: read_states(f, [MODELS_STATE, DATA_STATE]),
        outputs,
        {},
    )


def _op_cluster(workdir: Path) -> Op:
    from engine.index.keys import DENSE_VOCAB_STATE, GROUPING_STATE

    folder = fresh(workdir / "op_cluster")
    names = all_names(workdir)
    put(workdir, folder, TINY[:3])
    assert cli("index", folder, "--jobs", "1").code == 0
    run = cli("cluster", folder, "--no-update", "--k", "2", "--jobs", "1")
    assert run.code == 0, run.err
    more = [n for n in names if n not in TINY[:3]][:10]
    put(workdir, folder, more)  # 13 photos > 4 x 3: the vocabulary is refitted
    assert cli("index", folder, "--jobs", "1").code == 0
    probe = [folder / f"{TINY[0]}.jpg", folder / f"{more[0]}.jpg", folder / f"{more[5]}.jpg"]

    def outputs(f: Path) -> Any:
        run = cli("classify", f, *probe, "--json")
        return last_json(run.out)["results"] if run.code == 0 else ("error", run.err)

    return Op(
        "grouping",
        folder,
        workdir / "op_cluster.base",
        ["cluster", str(folder), "--no-update", "--k", "3", "--jobs", "1"],
        lambda f: read_states(f, [GROUPING_STATE, DENSE_VOCAB_STATE]),
        outputs,
        {DENSE_VOCAB_STATE: ("token",), GROUPING_STATE: ("vocab_token",)},
    )


def _op_learn(workdir: Path) -> Op:
    from engine.index.keys import LEARNED_MODEL_STATE

    folder = fresh(workdir / "op_learn")
    put(workdir, folder, TINY[:3], sub="a")
    put(workdir, folder, MORE[:3], sub="b")
    assert cli("index", folder, "--jobs", "1").code == 0
    run = cli("learn", folder, "--from-subfolders", "--method", "boostssc")
    assert run.code == 0, run.err
    put(workdir, folder, TINY[3:5], sub="a")
    put(workdir, folder, MORE[3:5], sub="b")
    assert cli("index", folder, "--jobs", "1").code == 0
    query = folder / "a" / f"{TINY[0]}.jpg"

    def outputs(f: Path) -> Any:
        run = cli("query", f, query, "--json", "--method", "learned", "--top", "20")
        if run.code != 0:
            return ("error", run.err)
        hits = last_json(run.out)["results"][0]["hits"]
        return [(_rel(h["path"], f), round(h["score"], 9)) for h in hits]

    return Op(
        "learned model",
        folder,
        workdir / "op_learn.base",
        ["learn", str(folder), "--from-subfolders", "--method", "oasis"],
        lambda f: read_states(f, [LEARNED_MODEL_STATE]),
        outputs,
        {},
    )


def _first_commit(op: Op, seen: list[str]) -> None:
    """Set ``op.mid`` (and ``mid_out``) to the version of the first of several commits of
    ``op`` (``seen``: its writes, from ``op.base``): the new photos with the old models,
    before the refit. Leaves the folder at that version."""
    commits = [k for k, name in enumerate(seen, 1) if name == "MANIFEST.json"]
    if len(commits) < 2:
        return
    restore(op.folder, op.base)
    try:
        with write_hook(_crash_hook("after", commits[0], Crash("first commit"))):
            cli(*op.argv)
    except Crash:
        pass
    op.mid, op.mid_out = op.read(op.folder), op.outputs(op.folder)
    assert not same_version(op.mid, op.old, op.ignore)
    assert not same_version(op.mid, op.new, op.ignore)


_OPS: dict[str, list[Op]] = {}


def ops(workdir: Path) -> list[Op]:
    """The three writers (an update, a grouping, a learned model), each with its base
    index, its writes and the old and new versions (made once per workdir)."""
    key = str(workdir)
    if key in _OPS:
        return _OPS[key]
    out = []
    for make in (_op_update, _op_cluster, _op_learn):
        op = make(workdir)
        backup(op.folder, op.base)
        op.old, op.old_out = op.read(op.folder), op.outputs(op.folder)
        seen: list[str] = []
        with write_hook(_recording_hook(seen, threading.Lock())):
            run = cli(*op.argv)
        assert run.code == 0, run.err
        op.writes = seen
        op.new, op.new_out = op.read(op.folder), op.outputs(op.folder)
        assert not same_version(op.old, op.new, op.ignore), f"{op.name}: nothing changes"
        assert op.old_out != op.new_out, f"{op.name}: the readers see no change"
        again = cli(*op.argv)  # deterministic: the same new version from the same start
        assert again.code == 0 and same_version(op.read(op.folder), op.new, op.ignore)
        _first_commit(op, seen)
        out.append(op)
    _OPS[key] = out
    return out


def _which(op: Op, version: dict) -> str | None:
    """ "old", "new", "first commit" (:attr:`Op.mid`) or None (neither: a mix) for a
    version read."""
    if same_version(version, op.old, op.ignore):
        return "old"
    if same_version(version, op.new, op.ignore):
        return "new"
    if op.mid is not None and same_version(version, op.mid, op.ignore):
        return "first commit"
    return None


def _mix_detail(op: Op, version: dict) -> str:
    parts = []
    for name in version:
        o = same_state(version[name], op.old[name], op.ignore.get(name, ()))
        n = same_state(version[name], op.new[name], op.ignore.get(name, ()))
        parts.append(f"{name}={'old' if o else 'new' if n else 'neither'}")
    return ", ".join(parts)


def _after_fault(op: Op, tally: Tally, before: dict) -> list[str]:
    """After a crash (or a full disk): the version read is the old or the new one, a
    reader's output is the old or the new one, and the next run gives the new one."""
    problems = []
    try:
        version = op.read(op.folder)
    except Exception as exc:
        return [f"the index cannot be read after the fault: {exc!r}"]
    which = _which(op, version)
    if which is None:
        problems.append(f"a MIX of versions is stored: {_mix_detail(op, version)}")
    else:
        tally.notes[f"{op.name}: {which} version after the fault"] += 1
    out = op.outputs(op.folder)
    if out in (op.old_out, op.new_out) or (op.mid is not None and out == op.mid_out):
        pass
    elif isinstance(out, tuple) and out[0] == "error":
        problems.append(f"the reader fails after the fault: {_tail(out[1], 20)}")
    elif op.name == "update":  # the catalogue may hold more photos (encoded in memory)
        if not out or out[0][0] != "brick.jpg":
            problems.append(f"the reader's answer is wrong: {out}")
    else:
        problems.append(
            f"the reader's output is neither the old nor the new one: {out} "
            f"(old: {op.old_out}; new: {op.new_out})"
        )
    if op.name == "update":
        problems += searcher_consistent(op.folder)
    again = cli(*op.argv)
    problems += ok_run(again, "the next run")
    if again.code == 0:
        if not same_version(op.read(op.folder), op.new, op.ignore):
            problems.append(
                "the next run did not give the new version: " + _mix_detail(op, op.read(op.folder))
            )
        if op.outputs(op.folder) != op.new_out:
            problems.append("after the next run the reader's output differs from a clean run")
        left = orphans(op.folder)
        if left:
            problems.append(f"files no version names were left: {left[:4]}")
    problems += untouched(before, op.folder)
    if problems:
        problems.append(f"(the writes of the {op.name}: {op.writes})")
    return problems


def _crash_cases(workdir: Path, stages: Sequence[str]) -> list[tuple[Op, int, str]]:
    """(op, k, stage) for every write k of every op, round robin over the ops."""
    return [
        (op, k, st) for op in ops(workdir) for k in range(1, len(op.writes) + 1) for st in stages
    ]


def _interleave(groups: Sequence[list]) -> list:
    out = []
    for i in range(max((len(g) for g in groups), default=0)):
        out += [g[i] for g in groups if i < len(g)]
    return out


def _sample_cases(cases: list[tuple[Op, int, str]], n: int, rng: random.Random) -> list:
    """``n`` of ``cases`` (all when ``n`` is larger): every op first, then every stage of
    each op, then seeded draws."""
    if n >= len(cases):
        return cases
    per_op = []
    for op in dict.fromkeys(c[0] for c in cases):
        stages = {}
        for c in cases:
            if c[0] is op:
                stages.setdefault(c[2], []).append(c)
        for lst in stages.values():
            rng.shuffle(lst)
        per_op.append(_interleave(list(stages.values())))
    return _interleave(per_op)[:n]


CaseFilter = Callable[[str, int, str], bool]  # (op name, k, stage) -> keep it


def crashes(
    n_cases: int,
    seed: int,
    workdir: Path,
    stages: Sequence[str] = ("after", "before", "exit"),
    select: CaseFilter | None = None,
) -> Outcome:
    """A crash at the k-th write of an update (``simile index``), a grouping (``simile
    cluster``) and a learned model (``simile learn --from-subfolders``): an exception
    before or after the write (clean-up handlers run), or ``os._exit`` right after it in
    a child process. ``n_cases`` < all: a seeded sample, every op and stage first;
    ``select(op name, k, stage)`` keeps only some cases."""
    rng = random.Random(seed)
    tally = Tally()
    cases = _crash_cases(workdir, stages)
    cases = [c for c in cases if select is None or select(c[0].name, c[1], c[2])]
    cases = _sample_cases(cases, n_cases, rng)
    for op in ops(workdir):
        tally.info.append(f"{op.name}: {len(op.writes)} writes")
    for op, k, stage in cases:
        label = f"{op.name}, crash {stage} write {k} ({op.writes[k - 1]})"

        def check(op: Op = op, k: int = k, stage: str = stage, label: str = label) -> list[str]:
            restore(op.folder, op.base)
            before = user_files(op.folder)
            if stage == "exit":
                run = cli_proc(
                    *op.argv[:1],
                    *op.argv[1:],
                    script=EXIT_SCRIPT,
                    extra_env={"SIMILE_FAULT_WRITE": str(k)},
                )
                if run.code != 137:
                    return [
                        f"{label}: the child was not stopped at the write "
                        f"(exit {run.code}): {_tail(run.err, 15)}"
                    ]
            else:
                try:
                    with write_hook(_crash_hook(stage, k, Crash(label))):
                        run = cli(*op.argv)
                except Crash:
                    pass
                else:
                    return [
                        f"{label}: the crash did not stop the command "
                        f"(exit {run.code}): {_tail(run.err, 25)}"
                    ]
            return _after_fault(op, tally, before)

        tally.case(label, check)
    return tally.outcome()


# ============================================================== 4. corrupted index files
def _index_files(folder: Path, kind: str, rng: random.Random) -> Path:
    idx = index_dir(folder)
    pick = {
        "catalog.sqlite": lambda: idx / "catalog.sqlite",
        "catalog.sqlite-wal": lambda: idx / "catalog.sqlite-wal",
        "catalog.sqlite-shm": lambda: idx / "catalog.sqlite-shm",
        "feature chunk": lambda: rng.choice(sorted((idx / "features").glob("c*.npy"))),
        "search models npz": lambda: rng.choice(sorted(idx.glob("states/search.models.*.npz"))),
        "search data npz": lambda: rng.choice(sorted(idx.glob("states/search.data.*.npz"))),
        "MANIFEST.json": lambda: idx / "states" / "MANIFEST.json",
        "SIMILE-INDEX marker": lambda: idx / "SIMILE-INDEX",
        "lock": lambda: idx / "lock",
    }
    return pick[kind]()


CORRUPT_KINDS = (
    "catalog.sqlite",
    "catalog.sqlite-wal",
    "catalog.sqlite-shm",
    "feature chunk",
    "search models npz",
    "search data npz",
    "MANIFEST.json",
    "SIMILE-INDEX marker",
    "lock",
)
CORRUPT_MODES = (
    "truncate",
    "cut the tail",
    "flip bytes",
    "zero a span",
    "zero a page",
    "zero a b-tree's rows",
    "delete",
    "replace by junk",
)
#: modes that only apply to some kinds of file
ONLY_FOR = {"zero a b-tree's rows": ("catalog.sqlite",)}


def _btree_rows_span(path: Path, name: str | None, rng: random.Random) -> tuple[str, int, int]:
    """A b-tree of the SQLite file ``path`` (table or index ``name``, else a seeded one)
    and where the rows (cells) of its root page lie: (name, start, end)."""
    import sqlite3

    conn = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        trees = dict(conn.execute("SELECT name, rootpage FROM sqlite_master WHERE rootpage > 0"))
    finally:
        conn.close()
    name = name or rng.choice(sorted(trees))
    root = trees[name]
    start = (root - 1) * page_size
    header = start + (100 if root == 1 else 0)
    with open(path, "rb") as fh:
        fh.seek(header + 5)
        content = int.from_bytes(fh.read(2), "big") or 65536
    return name, start + content, start + page_size


def _corrupt(path: Path, mode: str, rng: random.Random) -> str:
    """Damage ``path``; returns what was done."""
    size = path.stat().st_size if path.exists() else 0
    if mode == "delete":
        if not path.exists():
            return "absent already"
        path.unlink()
        return "deleted"
    if mode == "replace by junk":
        n = size or rng.randint(100, 40_000)
        path.write_bytes(rng.randbytes(n))
        return f"{n} random bytes"
    if size == 0:
        return "empty file: nothing to damage"
    if mode == "truncate":
        n = rng.randint(0, size - 1)
        os.truncate(path, n)
        return f"truncated to {n} of {size} bytes"
    if mode == "cut the tail":  # (an interrupted copy)
        n = max(0, size - rng.randint(1, 4096))
        os.truncate(path, n)
        return f"cut to {n} of {size} bytes"
    if mode.startswith("zero a b-tree's rows"):  # (":<name>" names the table or index)
        tree, lo, hi = _btree_rows_span(path, mode.partition(":")[2] or None, rng)
        with open(path, "r+b") as fh:
            fh.seek(lo)
            fh.write(bytes(hi - lo))
        return f"zeroed the rows of the b-tree {tree!r} (bytes {lo}-{hi})"
    data = bytearray(path.read_bytes())
    if mode == "zero a page":
        page = rng.randrange(max(1, -(-size // 4096)))
        n = min(4096, size - page * 4096)
        data[page * 4096 : page * 4096 + n] = bytes(n)
        done = f"zeroed page {page} (4096 bytes at {page * 4096})"
    elif mode == "flip bytes":
        where = sorted(rng.randrange(size) for _ in range(rng.randint(1, 8)))
        for at in where:
            data[at] ^= rng.randint(1, 255)
        done = f"flipped bytes at {where}"
    else:
        at = rng.randrange(size)
        n = min(size - at, rng.randint(16, 4096))
        data[at : at + n] = bytes(n)
        done = f"zeroed {n} bytes at {at}"
    path.write_bytes(bytes(data))
    return done


NAME_WORDS = {
    "catalog.sqlite": ("catalog.sqlite", "catalogue"),
    "catalog.sqlite-wal": ("catalog.sqlite", "catalogue"),
    "catalog.sqlite-shm": ("catalog.sqlite", "catalogue"),
    "MANIFEST.json": ("MANIFEST.json",),
    "SIMILE-INDEX marker": ("SIMILE-INDEX",),
    "lock": ("lock",),
}


HOT_WAL_SCRIPT = textwrap.dedent(
    """
    import os, sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("UPDATE settings SET value = value")
    conn.execute("UPDATE kv SET value = value + 1 WHERE key = 'generation'")
    os._exit(0)
    """
)


@dataclass
class CleanIndex:
    folder: Path  # where every case runs (the catalogue holds absolute paths)
    pristine: Path  # the folder and its clean index, copied with their times
    reference: Any
    queries: list[str]


_CLEAN: dict[str, CleanIndex] = {}


def _clean_index(workdir: Path) -> CleanIndex:
    key = str(workdir)
    if key not in _CLEAN:
        folder = fresh(workdir / "corrupt")
        put(workdir, folder, [*TINY, *MORE[:2]])
        assert cli("index", folder, "--jobs", "1").code == 0
        # a writer killed after a commit: the catalogue's last change is in its -wal only
        hot = cli_proc(index_dir(folder) / "catalog.sqlite", script=HOT_WAL_SCRIPT)
        assert hot.code == 0 and (index_dir(folder) / "catalog.sqlite-wal").stat().st_size
        queries = ["brick.jpg", "coffee.jpg", "chelsea.jpg"]
        reference = _cli_answers(folder, queries)
        pristine = workdir / "corrupt.pristine"
        if pristine.exists():
            shutil.rmtree(pristine)
        shutil.copytree(folder, pristine, symlinks=True)
        _CLEAN[key] = CleanIndex(folder, pristine, reference, queries)
    return _CLEAN[key]


def _cli_answers(folder: Path, queries: Sequence[str]) -> Any:
    """What ``simile query --json`` answers (every method), or the failed run."""
    out = {}
    for m in METHODS:
        run = cli(
            "query", folder, *[folder / q for q in queries], "--json", "--top", "10", "--method", m
        )
        if run.code != 0:
            return run
        res = last_json(run.out)["results"]
        out[m] = [[(Path(h["path"]).name, h["score"]) for h in r["hits"]] for r in res]
    return out


def corruption(
    n_cases: int,
    seed: int,
    workdir: Path,
    kinds: Sequence[str] = CORRUPT_KINDS,
    modes: Sequence[str] = CORRUPT_MODES,
    cases: Sequence[tuple[str, str]] | None = None,
) -> Outcome:
    """Each kind of index file x each way of damaging it (seeded where and how): a query
    either answers as a clean build, or fails in one line naming the index, the file and
    the remedy; ``simile index`` never prints a traceback; ``simile index --repair``
    then gives the answers of a clean build, and deletes no photo. ``cases``: explicit
    (kind, mode) pairs instead of ``n_cases`` drawn from ``kinds`` x ``modes``."""
    rng = random.Random(seed)
    tally = Tally()
    clean = _clean_index(workdir)
    folder = clean.folder
    if cases is None:
        combos = [(k, m) for k in kinds for m in modes if k in ONLY_FOR.get(m, (k,))]
        first = combos[:]
        rng.shuffle(first)
        cases = (first * (n_cases // len(combos) + 1))[:n_cases]
    for i, (kind, mode) in enumerate(cases):

        def check(kind: str = kind, mode: str = mode) -> list[str]:
            shutil.rmtree(folder)
            shutil.copytree(clean.pristine, folder, symlinks=True)
            path = _index_files(folder, kind, rng)
            done = _corrupt(path, mode, rng)
            label = f"{kind} ({path.name}): {mode}: {done}"
            before = user_files(folder)
            problems = []
            got = _cli_answers(folder, clean.queries)
            if isinstance(got, Run):
                tally.notes[f"{kind}: detected by a query"] += 1
                problems += one_line_error(got)
                line = got.err.strip().splitlines()[0] if got.err.strip() else ""
                if str(index_dir(folder)) not in line:
                    problems.append("the error does not name the index folder")
                if "--repair" not in line:
                    problems.append("the error does not give the remedy (--repair)")
                words = NAME_WORDS.get(kind, (path.name,))
                if not any(w in line for w in words):
                    if kind in ("feature chunk", "search models npz", "search data npz"):
                        tally.notes[f"{kind}: error names no file"] += 1
                    else:
                        problems.append(f"the error does not name the file ({words})")
                elif path.name not in line:
                    tally.notes[f"{kind}: error names the file by kind, not by name"] += 1
                if problems:
                    problems.append(f"the error: {line!r}")
            elif got == clean.reference:
                tally.notes[f"{kind}: harmless (answers as a clean build)"] += 1
            else:
                problems.append(
                    "SILENTLY WRONG ANSWERS (no error, answers differ from a "
                    f"clean build): {_diff_cli(got, clean.reference)}"
                )
            plain = cli("index", folder, "--jobs", "1")
            if plain.code is None or "Traceback" in plain.err:
                problems.append(f"'simile index' printed a traceback: {_tail(plain.err)}")
            elif plain.code != 0:
                problems += [f"'simile index': {p}" for p in one_line_error(plain)]
            rep = cli("index", folder, "--repair", "--jobs", "1")
            problems += ok_run(rep, "'simile index --repair'")
            bad = [ln for ln in rep.err.splitlines() if not ln.startswith("simile: repair: ")]
            if bad:
                problems.append(f"repair printed other lines: {bad[:3]}")
            if rep.code == 0:
                after = _cli_answers(folder, clean.queries)
                if after != clean.reference:
                    detail = (
                        _tail(after.err)
                        if isinstance(after, Run)
                        else _diff_cli(after, clean.reference)
                    )
                    problems.append(
                        f"after the repair the answers differ from a clean build: {detail}"
                    )
            problems += untouched(before, folder)
            if problems:
                problems.insert(0, label)
            return problems

        tally.case(f"#{i} {kind} / {mode}", check)
    return tally.outcome()


def _diff_cli(a: Any, b: Any) -> str:
    if isinstance(a, Run) or isinstance(b, Run):
        return "one of them failed"
    for m in a:
        if a[m] != b.get(m):
            return f"{m}: {a[m][0][:3]} vs {b[m][0][:3]}"
    return "(same)"


# ============================================================== 5. concurrency
def concurrency(
    n_cases: int,
    seed: int,
    workdir: Path,
    readers: int = 2,
    actions: Sequence[str] = ("add", "add", "remove", "replace"),
) -> Outcome:
    """Readers (``Collection.open(readonly=True)``, the searcher's models and data, a
    query) loop in threads while ``simile index`` runs in a child process on a changing
    folder (photos added, removed, replaced): no reader ever fails or gets models and
    data that do not belong together. The last case starts a second writer during an
    update: it must say, in one line, that another process is updating."""
    from engine.collection import Collection
    from engine.index.encode import compatible

    rng = random.Random(seed)
    tally = Tally()
    folder = fresh(workdir / f"concurrency{seed}")
    fixed = list(TINY[:3])
    put(workdir, folder, fixed)
    assert cli("index", folder, "--jobs", "1").code == 0
    pool = [n for n in all_names(workdir) if n not in fixed]
    stop = threading.Event()
    errors: list[tuple[int, str]] = []
    loads = Counter()
    epoch = [0]

    def read(r: int) -> None:
        qrng = random.Random(seed * 100 + r)
        while not stop.is_set():
            e = epoch[0]
            try:
                with Collection.open(folder, readonly=True) as col:
                    models, data = col.searcher.ensure()
                    if not compatible(models, data):
                        errors.append((e, "models and data do not belong together (a mix)"))
                    q = qrng.choice(fixed)
                    m = qrng.choice(["vocabulary", "uniform", "wta"])
                    hits = col.query(folder / f"{q}.jpg", method=m, top=3)
                    if not hits or Path(hits[0].path).name != f"{q}.jpg":
                        errors.append((e, f"{m} query {q}: best hits {hits[:2]}"))
                loads[e] += 1
            except Exception:
                errors.append((e, _tail(traceback.format_exc(), 20)))
                time.sleep(0.05)

    threads = [threading.Thread(target=read, args=(r,), daemon=True) for r in range(readers)]
    for t in threads:
        t.start()
    try:
        n_updates = max(1, n_cases - 1) if n_cases > 1 else 1
        for case in range(n_updates):
            present = sorted(p.stem for p in folder.glob("*.jpg") if p.stem not in fixed)
            absent = [n for n in pool if n not in present]
            action = rng.choice(actions) if present else "add"
            if action == "add":
                names = rng.sample(absent, min(len(absent), rng.randint(2, 5)))
                put(workdir, folder, names)
                what = f"add {names}"
            elif action == "remove":
                names = rng.sample(present, rng.randint(1, min(3, len(present))))
                for n in names:
                    (folder / f"{n}.jpg").unlink()
                what = f"remove {names}"
            else:
                target, src = rng.choice(present), rng.choice(absent)
                shutil.copy(half_photos(workdir) / f"{src}.jpg", folder / f"{target}.jpg")
                st = (folder / f"{target}.jpg").stat()
                os.utime(folder / f"{target}.jpg", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
                what = f"replace {target} by {src}"

            def check(case: int = case, what: str = what) -> list[str]:
                epoch[0] = case + 1
                run = cli_proc("index", folder, "--jobs", rng.choice(["1", "2"]))
                time.sleep(0.3)
                epoch[0] = -1
                problems = ok_run(run, "the writer")
                problems += [f"reader: {e}" for k, e in errors if k == case + 1][:3]
                if loads[case + 1] == 0:
                    tally.notes["updates no reader overlapped"] += 1
                return problems

            tally.case(f"update {case}: {what}", check)
        if n_cases > 1:
            tally.case("a second writer during an update", lambda: _second_writer(workdir, folder))
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    tally.case(  # (the loads made while no writer ran, between the updates)
        "readers while no writer runs",
        lambda: [f"reader: {e}" for k, e in errors if k <= 0][:3],
    )
    tally.info.append(f"{sum(loads.values())} reader loads")
    return tally.outcome()


def reader_during_removal(workdir: Path) -> list[str]:
    """The interleaving the concurrency family meets by chance, made deterministic: a
    reader loads the search data and, right after its read of the catalogue's rows (before
    it reads the saved states), ``simile index`` removes deleted photos and commits. The
    reader must answer from one version, not fail. (It failed with KeyError when the rows'
    keys and their paths were two reads: the writer committed in between.)"""
    from engine.collection import Collection

    folder = fresh(workdir / "race_removal")
    put(workdir, folder, TINY)
    assert cli("index", folder, "--jobs", "1").code == 0
    problems: list[str] = []
    with Collection.open(folder, readonly=True) as col:
        store = col.store
        real_rows = store.usable_rows
        fired: list[Run] = []

        def usable_rows() -> Any:
            rows = real_rows()
            if not fired:  # the writer commits right after the reader read the rows
                for n in TINY[3:]:
                    (folder / f"{n}.jpg").unlink()
                fired.append(cli("index", folder, "--jobs", "1"))
            return rows

        store.usable_rows = usable_rows  # (this reader's store only)
        try:
            col.searcher.ensure()
            hits = col.query(folder / "brick.jpg", method="vocabulary", top=3)
            if not hits or hits[0].path.name != "brick.jpg":
                problems.append(f"wrong answer: {hits[:2]}")
        except Exception:
            problems.append("the reader failed:\n" + _tail(traceback.format_exc(), 12))
        if not fired:
            problems.append("(the reader never read the rows: the interleaving was not made)")
        else:
            problems += ok_run(fired[0], "the writer")
    return problems


def _second_writer(workdir: Path, folder: Path) -> list[str]:
    """While ``simile index`` runs, a second ``simile index`` must refuse in one line."""
    extra = fresh(workdir / "concurrency_second")
    put(workdir, extra, all_names(workdir)[:24])
    proc = start_index(extra, 1)
    try:
        proc.stdout.readline()  # the writer holds the lock (its first progress line)
        second = cli("index", extra, "--jobs", "1")
        running = proc.poll() is None
    finally:
        proc.stdout.read()
        proc.wait(DEADLINE)
        proc.stdout.close()
    if not running:
        return []  # (the first writer had finished: inconclusive, not a failure)
    problems = one_line_error(second, 2)
    if "another simile process" not in second.err:
        problems.append(f"the refusal does not say why: {second.err!r}")
    if proc.returncode != 0:
        problems.append(f"the first writer failed: exit {proc.returncode}")
    return problems


# ============================================================== 6. full disk
def _enospc_hook(k: int) -> Callable[[str, Path], None]:
    def make() -> BaseException:
        return OSError(errno.ENOSPC, "No space left on device")

    count = [0]
    lock = threading.Lock()

    def hook(where: str, path: Path) -> None:
        if where == "before":
            with lock:
                count[0] += 1
                hit = count[0] == k
            if hit:
                exc = make()
                exc.filename = str(path)
                raise exc

    return hook


def disk_full(
    n_cases: int,
    seed: int,
    workdir: Path,
    tmpfs_share: float = 0.3,
    select: CaseFilter | None = None,
    frees: Sequence[int] | None = None,
) -> Outcome:
    """ENOSPC at the k-th write of an update, a grouping and a learned model (the write
    hook), and a real full disk (a small tmpfs filled to a seeded level, when mounting is
    allowed): one line naming the problem, exit status 1, the previous version intact
    (or the new one, when the disk filled after it was committed), and the next run
    completes it. ``select`` keeps only some of the simulated cases; ``frees``: the free
    bytes of the tmpfs cases (default: ``tmpfs_share`` of the cases, seeded)."""
    rng = random.Random(seed)
    tally = Tally()
    n_tmpfs = max(1, round(n_cases * tmpfs_share)) if n_cases > 1 else 0
    if frees is not None:
        n_tmpfs = len(frees)
    cases = _crash_cases(workdir, ("enospc",))
    cases = [c for c in cases if select is None or select(c[0].name, c[1], c[2])]
    cases = _sample_cases(cases, n_cases - n_tmpfs, rng)
    for op, k, _stage in cases:
        label = f"{op.name}, ENOSPC at write {k} ({op.writes[k - 1]})"

        def check(op: Op = op, k: int = k, label: str = label) -> list[str]:
            restore(op.folder, op.base)
            before = user_files(op.folder)
            with write_hook(_enospc_hook(k)):
                run = cli(*op.argv)
            problems = []
            warn = [ln for ln in run.err.splitlines() if "could not store the grouping" in ln]
            if op.name == "grouping" and run.code == 0 and warn:
                tally.notes["grouping: full disk at the grouping's save -> exit 0 + warning"] += 1
                if len([ln for ln in run.err.splitlines() if ln.strip()]) != 1:
                    problems.append(f"more than the warning line: {run.err!r}")
            else:
                problems += one_line_error(run, 1)
                if not re.search(r"no space|disk is full", run.err, re.I):
                    problems.append(f"the error does not say the disk is full: {run.err!r}")
            problems += _after_fault(op, tally, before)
            if problems:
                problems.insert(0, label)
            return problems

        tally.case(label, check)
    if n_tmpfs:
        mounted = _tmpfs_cases(n_tmpfs, rng, workdir, tally, frees)
        if not mounted:
            tally.info.append("real tmpfs: skipped (mount not permitted)")
    return tally.outcome()


@contextlib.contextmanager
def _mounted_tmpfs(where: Path, size: str):
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if done.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _tmpfs_cases(
    n: int, rng: random.Random, workdir: Path, tally: Tally, frees: Sequence[int] | None = None
) -> bool:
    """The update of the update op (the folder doubled, the models refitted) on a real
    24 MiB tmpfs, filled so that only a seeded amount is free."""
    from engine.index.keys import DATA_STATE, MODELS_STATE

    with _mounted_tmpfs(workdir / "tmpfs", "24m") as mnt:
        if mnt is None:
            return False
        folder = mnt / "photos"
        put(workdir, folder, TINY)
        assert cli("index", folder, "--jobs", "1").code == 0
        base = workdir / "tmpfs_base.simile"
        backup(folder, base)
        op = Op(
            "update",
            folder,
            base,
            ["index", str(folder), "--jobs", "1"],
            lambda f: read_states(f, [MODELS_STATE, DATA_STATE]),
            lambda f: None,
            {},
        )
        op.old = op.read(folder)
        put(workdir, folder, MORE)
        seen: list[str] = []
        with write_hook(_recording_hook(seen, threading.Lock())):
            assert cli(*op.argv).code == 0
        op.new = op.read(folder)
        _first_commit(op, seen)
        if frees is None:
            # log-uniform in [0, 4 MiB): full at the first write as often as at the last
            frees = [int(2 ** rng.uniform(0, 22)) - 1 for _ in range(n)]
        for free in frees:
            label = f"real full disk (tmpfs), {free} bytes free"

            def check(free: int = free, label: str = label) -> list[str]:
                restore(folder, base)
                filler = mnt / "filler"
                _fill(mnt, filler, free)
                before = user_files(folder)
                run = cli_proc("index", folder, "--jobs", "1")
                problems = []
                if run.code == 0:
                    tally.notes["tmpfs: the update fitted"] += 1
                else:
                    tally.notes["tmpfs: full disk reported"] += 1
                    problems += one_line_error(run, 1)
                    if not re.search(r"no space|disk is full", run.err, re.I):
                        problems.append(f"the error does not say the disk is full: {run.err!r}")
                try:
                    version = op.read(folder)
                    which = _which(op, version)
                    if which is None:
                        problems.append(f"a MIX of versions is stored: {_mix_detail(op, version)}")
                    else:
                        tally.notes[f"tmpfs: {which} version after the full disk"] += 1
                    problems += searcher_consistent(folder)
                except Exception as exc:
                    problems.append(f"the index cannot be read after the full disk: {exc!r}")
                filler.unlink()
                again = cli_proc("index", folder, "--jobs", "1")
                problems += ok_run(again, "the next run (space freed)")
                if again.code == 0 and not same_version(op.read(folder), op.new, op.ignore):
                    problems.append(
                        "the next run did not give the new version: "
                        + _mix_detail(op, op.read(folder))
                    )
                problems += untouched(before, folder)
                if problems:
                    problems.insert(0, label)
                return problems

            tally.case(label, check)
    return True


def _fill(mnt: Path, filler: Path, free: int) -> None:
    """Write ``filler`` until ``free`` bytes are left on ``mnt``."""
    st = os.statvfs(mnt)
    avail = st.f_bavail * st.f_frsize
    with open(filler, "wb") as fh:
        left = max(0, avail - free)
        block = b"\0" * (1 << 20)
        while left > 0:
            try:
                left -= fh.write(block[: min(left, len(block))])
            except OSError:
                break


# ============================================================== 7. read-only media
def read_only(n_cases: int, seed: int, workdir: Path) -> Outcome:
    """The folder (indexed, grouped, with a learned model) bind-mounted read-only over
    itself, with the ``-wal`` / ``-shm`` files a reader leaves and without them: every
    reading command answers as before; every writing command says in one line that it
    cannot write. ``n_cases`` commands (a seeded sample of them when fewer than all)."""
    rng = random.Random(seed)
    tally = Tally()
    folder = fresh(workdir / f"readonly{seed}")
    put(workdir, folder, TINY[:3], sub="a")
    put(workdir, folder, MORE[:3], sub="b")
    for argv in (
        ("index", folder, "--jobs", "1"),
        ("cluster", folder, "--no-update", "--k", "2", "--jobs", "1"),
        ("learn", folder, "--from-subfolders"),
    ):
        run = cli(*argv)
        assert run.code == 0, run.err
    img = folder / "a" / f"{TINY[0]}.jpg"
    fb = workdir / "readonly_feedback.csv"
    fb.write_text(f"query,result,relevant\n{img},{folder / 'a' / (TINY[1] + '.jpg')},1\n")
    readers = [("query", folder, img, "--json", "--method", m) for m in (*METHODS, "learned")]
    readers += [
        ("duplicates", folder, "--json"),
        ("classify", folder, img, "--json"),
        ("eval", folder, "--protocol", "folders", "--method", "vocabulary", "--json"),
    ]
    writers = [
        ("index", folder, "--jobs", "1"),
        ("index", folder, "--repair"),
        ("cluster", folder, "--no-update", "--k", "2"),
        ("learn", folder, "--from-subfolders"),
        ("learn", folder, "--feedback", fb),
    ]
    reference = {argv: cli(*argv) for argv in readers}
    all_cases = [
        (v, a) for v in ("with -wal/-shm", "without -wal/-shm") for a in readers + writers
    ]
    if n_cases < len(all_cases):
        picks = [all_cases[0], all_cases[len(readers)], all_cases[-1]]
        rest = [c for c in all_cases if c not in picks]
        rng.shuffle(rest)
        all_cases = (picks + rest)[:n_cases]
    idx = index_dir(folder)
    snapshot = {p: p.read_bytes() for p in idx.rglob("*") if p.is_file() and p.name != "lock"}
    for variant in ("with -wal/-shm", "without -wal/-shm"):
        cases = [a for v, a in all_cases if v == variant]
        if not cases:
            continue
        if variant.startswith("without"):
            for s in ("-wal", "-shm"):
                p = idx / f"catalog.sqlite{s}"
                if p.exists():
                    p.unlink()
        if (
            subprocess.run(
                ["mount", "--bind", str(folder), str(folder)], capture_output=True
            ).returncode
            != 0
        ):
            tally.notes["skipped: bind mounts not permitted"] += 1
            break
        try:
            if (
                subprocess.run(
                    ["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True
                ).returncode
                != 0
            ):
                tally.notes["skipped: read-only remount not permitted"] += 1
                break
            for argv in cases:
                name = " ".join(str(a) for a in argv[:1] + argv[2:] if str(a) != str(fb))

                def check(argv: tuple = argv) -> list[str]:
                    run = cli(*argv)
                    if argv in reference:
                        ref = reference[argv]
                        if run.code != 0:
                            return [f"a reader failed on read-only media: {_tail(run.err)}"]
                        if _strip_seconds(run.out) != _strip_seconds(ref.out):
                            return [
                                f"answers differ on read-only media: {run.out[:300]!r} "
                                f"vs {ref.out[:300]!r}"
                            ]
                        return []
                    problems = one_line_error(run)
                    if not re.search(r"read-only|cannot write|not writable", run.err, re.I):
                        problems.append(f"does not say it cannot write: {run.err!r}")
                    return problems

                tally.case(f"{variant}: simile {name}", check)
        finally:
            subprocess.run(["umount", str(folder)], capture_output=True)
    changed = [p.name for p, b in snapshot.items() if not p.exists() or p.read_bytes() != b]
    changed = [c for c in changed if not c.startswith("catalog.sqlite-")]
    if changed:
        tally.failures.append(f"[read-only] index files changed: {changed}")
    return tally.outcome()


def _strip_seconds(text: str) -> str:
    return re.sub(r'"seconds[a-z_]*":\s*[0-9.e+-]+', "", text)


# ============================================================== 8. bad command lines
@dataclass
class BadCtx:
    folder: Path  # indexed and grouped, two subfolders
    plain: Path  # indexed, never grouped
    bare: Path  # photos, never indexed
    img: Path
    img2: Path
    junk: Path  # a file that is no image
    missing: Path
    feedback: Path  # a folder of malformed feedback files


def _feedback_files(where: Path, img: Path, img2: Path) -> list[Path]:
    where.mkdir(parents=True, exist_ok=True)
    deep = "[" * 100_000 + "]" * 100_000
    files = {
        "nul.csv": f"query,result,relevant\n{img},{img2},1\x00\n".encode(),
        "nul.json": b'{"marks": [{"query": "a\x00", "result": "b", "relevant": true}]}',
        "deep.json": deep.encode(),
        "deep_marks.json": ('{"marks": ' + deep + "}").encode(),
        "invalid.json": b'{"marks": [{"query": ',
        "shape.json": b'{"marks": 3}',
        "null_query.json": json.dumps(
            {"marks": [{"query": None, "result": str(img2), "relevant": True}]}
        ).encode(),
        "number_path.json": json.dumps(
            {"marks": [{"query": 7, "result": [1], "relevant": True}]}
        ).encode(),
        "bad_relevant.json": json.dumps(
            [{"query": str(img), "result": str(img2), "relevant": "maybe"}]
        ).encode(),
        "nan.json": b'[{"query": "a.jpg", "result": "b.jpg", "relevant": NaN}]',
        "no_header.csv": f"{img},{img2},1\n".encode(),
        "wrong_columns.csv": b"a,b,c\n1,2,3\n",
        "bad_value.csv": f"query,result,relevant\n{img},{img2},perhaps\n".encode(),
        "empty_path.csv": f"query,result,relevant\n,{img2},1\n".encode(),
        "empty.csv": b"",
        "latin1.csv": b"query,result,relevant\n/tmp/M\xfcnchen.jpg,b.jpg,1\n",
        "binary.json": bytes(range(256)) * 64,
        "header_only.csv": b"query,result,relevant\n",
        "unknown_photos.csv": b"query,result,relevant\n/nope/a.jpg,/nope/b.jpg,1\n",
    }
    out = []
    for name, data in files.items():
        (where / name).write_bytes(data)
        out.append(where / name)
    (where / "a_folder.csv").mkdir(exist_ok=True)
    out += [where / "a_folder.csv", where / "missing.csv"]
    return out


_BAD: dict[str, tuple[BadCtx, list[tuple[str, list]]]] = {}


def _bad_ctx(workdir: Path) -> tuple[BadCtx, list[tuple[str, list]]]:
    key = str(workdir)
    if key in _BAD:
        return _BAD[key]
    folder = fresh(workdir / "badcli_folder")
    put(workdir, folder, TINY[:3], sub="a")
    put(workdir, folder, MORE[:3], sub="b")
    assert cli("index", folder, "--jobs", "1").code == 0
    assert cli("cluster", folder, "--no-update", "--k", "2", "--jobs", "1").code == 0
    plain = fresh(workdir / "badcli_plain")
    put(workdir, plain, TINY[:3])
    assert cli("index", plain, "--jobs", "1").code == 0
    bare = fresh(workdir / "badcli_bare")
    put(workdir, bare, TINY[:2])
    junk = workdir / "badcli_junk.jpg"
    junk.write_bytes(b"definitely not an image" * 10)
    img, img2 = folder / "a" / f"{TINY[0]}.jpg", folder / "b" / f"{MORE[0]}.jpg"
    ctx = BadCtx(
        folder,
        plain,
        bare,
        img,
        img2,
        junk,
        workdir / "badcli_missing",
        workdir / "badcli_feedback",
    )
    _BAD[key] = (ctx, _bad_argvs(ctx))
    return _BAD[key]


def _bad_argvs(c: BadCtx) -> list[tuple[str, list]]:
    """Every bad command line of the family: (what, argv)."""
    F, IM, J, M = c.folder, c.img, c.junk, c.missing
    a, b = f"a/{TINY[0]}.jpg", f"b/{MORE[0]}.jpg"
    cmds = ("index", "query", "duplicates", "eval", "cluster", "classify", "learn", "match")
    out: list[tuple[str, list]] = []
    for cmd in cmds:
        args = {"query": [F, IM], "classify": [F, IM], "match": [IM, IM]}.get(cmd, [F])
        out.append((f"unknown option: {cmd}", [cmd, *args, "--no-such-option"]))
        out.append((f"unknown option with value: {cmd}", [cmd, "--frobnicate=3", *args]))
        out.append((f"missing positional: {cmd}", [cmd]))
    missing_value = [
        ("index", "--jobs"),
        ("index", "--index"),
        ("query", "--top"),
        ("query", "--method"),
        ("cluster", "--k"),
        ("cluster", "--must"),
        ("duplicates", "--threshold"),
        ("eval", "--protocol"),
        ("learn", "--feedback"),
        ("cluster", "--power"),
    ]
    for cmd, opt in missing_value:
        args = [F, IM] if cmd == "query" else [F]
        out.append((f"missing value: {cmd} {opt}", [cmd, *args, opt]))
    wrong = [
        ["query", F, IM, "--top", "abc"],
        ["query", F, IM, "--top", "0"],
        ["query", F, IM, "--top", "-3"],
        ["query", F, IM, "--method", "nope"],
        ["index", F, "--jobs", "0"],
        ["index", F, "--jobs", "x"],
        ["index", F, "--jobs", "-2"],
        ["cluster", F, "--no-update", "--k", "0"],
        ["cluster", F, "--no-update", "--k", "two"],
        ["cluster", F, "--no-update", "--k", "-1"],
        ["cluster", F, "--no-update", "--k", ""],
        ["cluster", F, "--no-update", "--k", "999"],
        ["cluster", F, "--no-update", "--power", "2"],
        ["cluster", F, "--no-update", "--power", "0"],
        ["cluster", F, "--no-update", "--power", "nan"],
        ["cluster", F, "--no-update", "--spatial", "3", "--features", "index"],
        ["cluster", F, "--no-update", "--spatial", "4"],
        ["cluster", F, "--no-update", "--prototypes", "0"],
        ["cluster", F, "--no-update", "--prototypes", "101"],
        ["cluster", F, "--no-update", "--partners", "0"],
        ["cluster", F, "--no-update", "--features", "bogus"],
        ["cluster", F, "--no-update", "--jobs", "0"],
        ["duplicates", F, "--threshold", "2"],
        ["duplicates", F, "--threshold", "0"],
        ["duplicates", F, "--threshold", "abc"],
        ["eval", F, "--protocol", "bogus"],
        ["eval", F, "--protocol", "folders", "--k", "0"],
        ["eval", F, "--protocol", "folders", "--method", "nope"],
        ["learn", F, "--from-subfolders", "--method", "nope"],
        ["match", IM, IM, "--method", "bogus"],
        ["match", IM, IM, "--max-features", "x"],
    ]
    out += [("wrong value: " + " ".join(str(x) for x in w[:1] + w[2:]), w) for w in wrong]
    paths = [
        ["index", M],
        ["query", M, IM],
        ["query", F, M],
        ["classify", F, M],
        ["cluster", M],
        ["learn", M, "--from-subfolders"],
        ["duplicates", M],
        ["eval", M, "--protocol", "folders"],
        ["match", IM, M],
        ["match", J, IM],
        ["query", F, J],
        ["classify", F, J],
        ["query", F, IM, "--index", M],
        ["query", F, F],
        ["index", J],
        ["query", J, IM],
        ["index", c.bare, "--index", c.bare],
        ["query", F, IM, "--index", c.bare],
    ]
    out += [("bad path: " + " ".join(_short(x, c) for x in p), p) for p in paths]
    for cmd in ("index", "query", "cluster", "learn", "duplicates"):
        extra = {"query": [IM], "learn": ["--from-subfolders"]}.get(cmd, [])
        out.append((f"empty folder argument: {cmd}", [cmd, "", *extra]))
        out.append((f"blank folder argument: {cmd}", [cmd, "   ", *extra]))
    out += [
        ("not indexed: query", ["query", c.bare, IM]),
        ("not indexed: classify", ["classify", c.bare, IM]),
        ("not indexed: duplicates", ["duplicates", c.bare]),
        ("not indexed: learn", ["learn", c.bare, "--from-subfolders"]),
        ("not indexed: eval", ["eval", c.bare, "--protocol", "folders"]),
        ("never grouped: classify", ["classify", c.plain, IM]),
        (
            "no learned model: query --method learned",
            ["query", c.plain, IM, "--method", "learned"],
        ),
        ("too few photos to learn", ["learn", c.plain, "--from-subfolders"]),
    ]
    out += [
        (
            "contradiction: --must a b --cannot a b",
            ["cluster", F, "--no-update", "--must", a, b, "--cannot", a, b],
        ),
        (
            "contradiction: --cannot b a after --must a b",
            ["cluster", F, "--no-update", "--must", a, b, "--cannot", b, a],
        ),
        ("same image twice: --must a a", ["cluster", F, "--no-update", "--must", a, a]),
        ("unknown image: --must", ["cluster", F, "--no-update", "--must", a, "nope.jpg"]),
        ("unknown image: --cannot", ["cluster", F, "--no-update", "--cannot", "x.jpg", b]),
        ("one value: --must a", ["cluster", F, "--no-update", "--must", a]),
        ("two sources", ["learn", F, "--from-subfolders", "--from-marks"]),
        ("no source", ["learn", F]),
        ("non-UTF-8 path", ["query", F, os.fsdecode(b"/tmp/M\xfcnchen_\xff_missing.jpg")]),
        ("non-UTF-8 folder", ["index", os.fsdecode(b"/tmp/no_\xff\xfe_folder")]),
        ("very long path", ["query", F, "/tmp/" + "x" * 5000 + ".jpg"]),
        ("very long folder", ["index", "/tmp/" + "y" * 5000]),
        ("very long path component", ["query", F, "/tmp/" + "z" * 300 + ".jpg"]),
    ]
    for fb in _feedback_files(c.feedback, c.img, c.img2):
        out.append((f"malformed feedback file: {fb.name}", ["learn", F, "--feedback", fb]))
    return out


def _short(x: Any, c: BadCtx) -> str:
    names = {
        c.folder: "FOLDER",
        c.img: "IMAGE",
        c.junk: "JUNK",
        c.missing: "MISSING",
        c.bare: "UNINDEXED",
    }
    return names.get(x, str(x))


def bad_command_line(workdir: Path, what: str) -> list[str]:
    """The problems of the one bad command line named ``what`` (see :func:`_bad_argvs`)."""
    _ctx, argvs = _bad_ctx(workdir)
    argv = next(a for w, a in argvs if w == what)
    return one_line_error(cli_proc(*argv, timeout=120), 2)


def bad_command_lines(
    n_cases: int, seed: int, workdir: Path, names: Sequence[str] | None = None
) -> Outcome:
    """Bad command lines (unknown options, missing or wrong values, missing or odd paths,
    empty folders, contradictory --must / --cannot, malformed feedback files with NUL
    bytes, deep nesting, wrong types, ...) run as ``python -m app`` in a child process:
    exit status 2, one error line (plus at most the parser's hint), no traceback, and no
    file of the folders touched. ``n_cases``: a seeded sample (all of them, each once,
    when more); ``names``: these cases instead."""
    rng = random.Random(seed)
    tally = Tally()
    ctx, argvs = _bad_ctx(workdir)
    if names is not None:
        cases = [(w, a) for w, a in argvs if w in names]
        assert len(cases) == len(names), f"unknown cases: {names}"
    else:
        order = argvs[:]
        rng.shuffle(order)
        cases = order[:n_cases]
    folders = (ctx.folder, ctx.plain, ctx.bare)
    for what, argv in cases:

        def check(argv: list = argv) -> list[str]:
            before = [user_files(f) for f in folders]
            run = cli_proc(*argv, timeout=120)
            problems = one_line_error(run, 2)
            for f, b in zip(folders, before, strict=True):
                problems += untouched(b, f)
            if (ctx.bare / ".simile").exists():
                problems.append("an index was created in a folder that was never indexed")
                shutil.rmtree(ctx.bare / ".simile")
            return problems

        tally.case(what, check)
    return tally.outcome()


# ============================================================== the table
ALL = 10**9  # "every case of the family", whatever the scale
FAMILIES: dict[str, tuple[str, Callable[..., Outcome], int]] = {
    # key: (label, function, cases at --scale 1 (about 13 minutes on 2 cores))
    "broken": ("seeded broken / odd files (indexing)", broken_images, 720),
    "kills": ("kills (SIGKILL) of the indexer", kills, 20),
    "crashes": ("crashes at every write (update, grouping, learned model)", crashes, ALL),
    "corrupt": ("corrupted index files", corruption, 128),
    "concurrency": ("readers during updates; a second writer", concurrency, 13),
    "diskfull": ("full disk (ENOSPC at every write; a real tmpfs)", disk_full, ALL),
    "readonly": ("read-only media", read_only, ALL),
    "cli": ("bad command lines", bad_command_lines, ALL),
}


def run_all(scale: float, seed: int, workdir: Path, names: Sequence[str]) -> list[tuple]:
    """Run the families ``names``; returns (label, Outcome, seconds) rows."""
    rows = []
    for key in names:
        label, fn, base = FAMILIES[key]
        n = base if base == ALL else max(1, round(base * scale))
        if key == "diskfull":  # every write of every op, plus the real full disks
            n = len(_crash_cases(workdir, ("enospc",))) + max(1, round(10 * scale))
            fn = partial(disk_full, tmpfs_share=max(1, round(10 * scale)) / n)
        t0 = time.monotonic()
        shown = "all" if n == ALL else n
        print(f"== {label}: {shown} cases ...", file=sys.stderr, flush=True)
        try:
            out = fn(n, seed, workdir)
        except Exception:
            out = Outcome(0, 0, ["the family could not run:\n" + traceback.format_exc()])
        took = time.monotonic() - t0
        print(
            f"   {out.tried} tried, {out.survived} survived in {took:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        rows.append((label, out, took))
    return rows


def table(rows: Sequence[tuple], max_notes: int = 6) -> str:
    """The markdown table: family | tried | survived | notes (the first notes; every
    note is listed below the table by :func:`main`)."""
    lines = ["| family | tried | survived | notes |", "|---|---:|---:|---|"]
    for label, out, took in rows:
        notes = list(out.notes[:max_notes])
        if len(out.notes) > max_notes:
            notes.append(f"... ({len(out.notes) - max_notes} more below)")
        notes = "; ".join([*notes, f"{took:.0f} s"]).replace("|", "/")
        lines.append(f"| {label} | {out.tried} | {out.survived} | {notes} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="cases per family x this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help=f"comma-separated subset of {','.join(FAMILIES)}",
    )
    p.add_argument("--workdir", help="scratch folder (default: a new temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.families.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        p.error(f"unknown families {unknown}; choose from {','.join(FAMILIES)}")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="simile-faults-"))
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        rows = run_all(args.scale, args.seed, workdir, names)
    finally:
        if not args.keep:
            subprocess.run(["umount", "-l", str(workdir / "tmpfs")], capture_output=True)
            shutil.rmtree(workdir, ignore_errors=True)
    print(table(rows))
    print(f"\n(scale {args.scale}, seed {args.seed}, {time.monotonic() - t0:.0f} s in all)")
    print("\n## Notes\n")
    for label, out, _ in rows:
        print(f"- {label}:")
        for note in out.notes:
            print(f"  - {note}")
    failed = [(label, f) for label, out, _ in rows for f in out.failures]
    if failed:
        print(f"\n## {len(failed)} failure(s)\n")
        for label, f in failed:
            print(f"- {label}: {f}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
