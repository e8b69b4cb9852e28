"""``simile duplicates FOLDER``: duplicate groups by tier, and the copy to keep.

The groups come from :meth:`engine.collection.Collection.duplicates` (tiers and defaults
of :mod:`engine.workflows.duplicates`, the app's too); the copy suggested to keep from
:func:`engine.workflows.duplicates.suggest_keeper`. This module parses the arguments,
shows progress on stderr (a bar on a terminal; otherwise a line every
:data:`LINE_EVERY` seconds, for logs and pipes) and prints; Ctrl-C stops the search.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading
import time

from app.commands._collection import open_collection
from app.commands._common import CommandError, Progress, emit_json

#: Seconds between two progress lines when stderr is not a terminal.
LINE_EVERY = 10.0

TIER_LABELS = {
    "identical": "identical files",
    "same_photo": "the same photo",
    "similar_shots": "similar shots",
}


#: Related photos of a group printed at most (the best linked; ``--json`` has all).
RELATED_SHOWN = 5


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "duplicates",
        help="find duplicate images (identical files, copies of one photo, similar shots)",
        description=(
            "Group the duplicates of an indexed FOLDER in three tiers: identical files (same "
            "bytes); the same photo (a resized, recompressed, converted, edited, cropped or "
            "rotated copy: one transform explains the other and the aligned pixels agree); "
            "similar shots (many verified matches but not one transform: bursts, brackets). "
            "Each group names the copy to keep and why."
        ),
    )
    p.add_argument("folder", metavar="FOLDER", help="indexed photo folder")
    p.add_argument("--index", metavar="DIR", help="index directory (overrides the default)")
    p.add_argument(
        "--tiers",
        default="identical,same_photo,similar_shots",
        metavar="LIST",
        help="comma-separated tiers to report: identical, same_photo, similar_shots (all)",
    )
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder whose photos are always the ones kept (repeatable)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        metavar="T",
        help="least score of a similar-shots link, in (0, 1] (default: the engine's)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def _tiers(text: str) -> tuple[str, ...]:
    from engine.workflows.duplicates import TIERS

    tiers = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [t for t in tiers if t not in TIERS]
    if bad or not tiers:
        raise CommandError(f"--tiers takes a comma-separated subset of {', '.join(TIERS)}")
    return tuple(t for t in TIERS if t in tiers)


class LineProgress:
    """Progress of the pair checks as lines on ``stream`` (stderr not a terminal): when
    the checks start, every ``every`` seconds, and when they end."""

    def __init__(self, stream=None, every: float = LINE_EVERY) -> None:
        self.stream = stream or sys.stderr
        self.every = every
        self.start = time.monotonic()
        self._last: float | None = None
        self._last_rows: float | None = None
        self._rate_base: tuple[float, int] | None = None  # (time, pairs done) the rate is from

    def begin(self) -> None:
        self._say("simile: duplicates: finding the candidate pairs")

    def __call__(self, done: int, total: int) -> None:
        self.update(done, total)

    def candidates(self, done: int, n: int) -> None:
        """``done`` of the ``n`` photos' candidate pairs found (a line every ``every`` s)."""
        now = time.monotonic()
        if now - (self._last_rows or self.start) < self.every or done >= n:
            return
        self._last_rows = now
        self._say(
            f"simile: duplicates: finding the candidate pairs: {done:,} of {n:,} photos "
            f"({100 * done / max(n, 1):.0f} %), {_duration(now - self.start)}"
        )

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self._last is None:  # the checks start (the pairs known before are done)
            self._last = now
            known = f" ({done:,} remembered from an earlier search)" if done else ""
            self._say(f"simile: duplicates: checking {total:,} pairs{known}")
            return
        if self._rate_base is None:
            # the rate is measured from the first count after the start: the pairs checked
            # while the candidates were still being found arrive in that count at once
            self._rate_base = (now, done)
        if now - self._last < self.every and done < total:
            return
        self._last = now
        elapsed = now - self.start
        line = f"simile: duplicates: checked {done:,} of {total:,} pairs"
        line += f" ({100 * done / max(total, 1):.0f} %), {_duration(elapsed)}"
        t0, first = self._rate_base
        if done < total and done > first and now > t0:
            rate = (done - first) / (now - t0)
            line += f", about {_duration((total - done) / rate)} left"
        self._say(line)

    def close(self) -> None:
        pass

    def say(self, line: str) -> None:
        """Write ``line`` (a stage of the search)."""
        self._say(line)

    def _say(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


def _duration(seconds: float) -> str:
    """``"42 s"``, ``"3 min 05 s"``, ``"1 h 02 min"``."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def run(args: argparse.Namespace) -> int:
    if args.threshold is not None and not 0 < args.threshold <= 1:
        raise CommandError(f"--threshold must be in (0, 1], got {args.threshold}")
    from engine.workflows.duplicates import DEFAULT_RULE
    from engine.workflows.keeper import suggest_keepers

    tiers = _tiers(args.tiers)
    cancel = threading.Event()
    err = sys.stderr
    tty = hasattr(err, "isatty") and err.isatty()
    progress = Progress("checking pairs") if tty else LineProgress(err)
    report = progress.update if tty else progress

    def on_sigint(signum, frame):  # first Ctrl-C: stop after the current block
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if in_main else None
    col = open_collection(args.folder, args.index, create=False, readonly=True)
    if not tty:
        progress.begin()
    try:
        groups = col.duplicates(args.threshold, tiers=tiers, cancel=cancel, progress=report)
    except InterruptedError:
        progress.close()
        print("simile: interrupted; no groups were reported", file=sys.stderr)
        return 130
    except LookupError as exc:
        raise CommandError(str(exc)) from None
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
        col.close()
    progress.close()
    out = []
    if not tty and groups:
        progress.say(f"simile: duplicates: choosing the copy to keep in {len(groups):,} groups")
    keepers = suggest_keepers(
        [g.paths for g in groups], reference=args.reference, tiers=[g.tier for g in groups]
    )
    for g, keeper in zip(groups, keepers, strict=True):
        reason = None if keeper is None else keeper.reason
        out.append({
            "tier": g.tier,
            "paths": [str(p) for p in g.paths],
            "scores": [float(s) for s in g.scores],
            "keep": None if keeper is None else keeper.path,
            "reason": reason,
            "keep_reason": reason,
            "related": [{"path": str(p), "score": float(s)} for p, s in g.related],
            "apart": [[str(a), str(b)] for a, b in g.apart],
        })  # fmt: skip
    rule = DEFAULT_RULE.with_threshold(args.threshold)
    settings = {
        "tiers": list(tiers),
        "reference": list(args.reference),
        "rule": dataclasses.asdict(rule),
        "description": (
            "identical: same bytes; same_photo: one homography explains the pair with at "
            f"least {rule.min_inliers} inliers, >= {rule.same_photo_fraction:g} of the "
            f"features in the overlap agreeing, median residual <= "
            f"{rule.same_photo_residual:g} of the side and <= "
            f"{rule.same_photo_residual_px:g} px of the smaller picture (<= "
            f"{rule.same_photo_residual_px_frame:g} px when the frames meet within "
            f"{rule.same_photo_frame_px:g} px or the map of the whole frame explains the "
            f"features within {rule.same_photo_residual_px_frame:g} px), aligned detail "
            f"correlating >= "
            f"{rule.same_photo_pixels:g} (or >= {rule.same_photo_compressed:g} once the "
            "larger picture is compressed like the smaller JPEG) and no differing EXIF "
            "capture times; "
            f"similar_shots: >= {rule.min_inliers} inliers and score >= "
            f"{rule.similar_score:g} otherwise"
        ),
    }
    if args.json:
        emit_json({"settings": settings, "threshold": rule.similar_score, "groups": out})
    else:
        if not out:
            print("no duplicates found")
        group_of = {p: k for k, g in enumerate(out, 1) for p in g["paths"]}
        for k, g in enumerate(out, 1):
            print(f"group {k}: {TIER_LABELS[g['tier']]} ({len(g['paths'])} images)")
            for p, s in zip(g["paths"], g["scores"], strict=True):
                print(f"  {'*' if p == g['keep'] else ' '} {s:6.3f}  {p}")
            if g["keep"] is not None:
                print(f"    keep {g['keep']}: {g['reason']}")
            for a, b in g["apart"]:
                print(f"    not copies of each other (another shot?): {a} ~ {b}")
            for r in g["related"][:RELATED_SHOWN]:
                where = group_of.get(r["path"])
                where = f", in group {where}" if where else ", in no group"
                print(f"    similar, not in this group: {r['path']} ({r['score']:.3f}{where})")
            if len(g["related"]) > RELATED_SHOWN:
                more = len(g["related"]) - RELATED_SHOWN
                print(f"    … and {more} more similar (--json lists all)")
        if out:
            print("(* the copy to keep)")
    return 0
