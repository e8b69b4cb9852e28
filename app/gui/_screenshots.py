"""Regenerate the README screenshots (``assets/screenshots/*.png``) headlessly.

``python -m app.gui._screenshots [--demo DIR] [--out DIR]`` runs
``simile DEMO --index TMP --screenshot PNG`` for each view with
``QT_QPA_PLATFORM=offscreen`` (the demo folder holds each photo with edited views of
it: crops, rotations, perspective, lighting, heavy JPEG, so search, correspondences
and duplicates all have something to show; ``results_grid`` shows a search's results in
the main grid). The index goes to a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from app.gui.state import demo_folder

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", type=Path, default=demo_folder())
    p.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshots")
    p.add_argument("--size", default="1360x840")
    args = p.parse_args(argv)
    if args.demo is None or not args.demo.is_dir():
        p.error("the demo photos were not found; pass --demo DIR")
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    with tempfile.TemporaryDirectory(prefix="simile-shots-") as tmp:
        folder = args.demo
        index = Path(tmp) / "index"
        runs = {
            "results": ["--query", str(folder / "chelsea_perspective.jpg")],
            "results_grid": [
                "--query",
                str(folder / "chelsea_perspective.jpg"),
                "--view",
                "grid-results",
            ],
            "matches": ["--query", str(folder / "astronaut_rotate.jpg"), "--view", "matches"],
            "duplicates": ["--view", "duplicates"],
            # automatic k: 11 groups of the demo's 12 subjects (grass and gravel together)
            "clusters": ["--view", "clusters"],
        }
        for name, extra in runs.items():
            out = args.out / f"{name}.png"
            cmd = [
                sys.executable,
                "-m",
                "app",
                str(folder),
                "--index",
                str(index),
                "--screenshot",
                str(out),
                "--size",
                args.size,
                *extra,
            ]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return proc.returncode
            print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
