"""GUI-thread time of keeping one grouping edit in the index, at library scale.

``python tests/benchmarks/bench_grouping_save.py [--n 10000] [--k 50] [--history 50]``

After every edit (rename, move, split, merge, undo) the Categories view keeps the grouping,
the person's edits and the undo history (up to 50 earlier states) in the index. Measured in
one run on the same index, median of ``--repeat`` edits:

- ``written here``: copy, serialize and write on the calling thread (the GUI thread did
  all of it before the session's background writer, :class:`app.gui.session.IndexWrites`);
- ``GUI thread now``: the copy and the hand-over to the writer, which is all the GUI thread
  does now; ``written in the background``: the writer's time for the same state.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from app.gui.categories import save_grouping_state
    from app.gui.session import GroupingModel, IndexWrites
    from engine.cluster import EditableGrouping
    from engine.index.store import IndexStore

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000, help="photos")
    p.add_argument("--k", type=int, default=50, help="groups")
    p.add_argument("--history", type=int, default=50, help="undo states kept")
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args(argv)

    rng = np.random.default_rng(0)
    paths = [f"/photos/2026/trip/IMG_{i:06d}.jpg" for i in range(args.n)]
    labels = np.sort(rng.integers(0, args.k, args.n))
    g = EditableGrouping(paths, labels, rng.random(args.n), rng.random(args.n) < 0.05,
                         rng.random(args.n) < 0.02, "k given")  # fmt: skip
    m = GroupingModel()
    m.set_grouping(g)
    for i in range(args.history):  # the undo stack full of earlier states
        m.rename(i % args.k, f"Group name {i}")
    with tempfile.TemporaryDirectory(prefix="simile-bench-save-") as tmp:
        store = IndexStore.open(Path(tmp) / "index")
        try:
            sync, gui, background = [], [], []
            writes = IndexWrites()
            for r in range(args.repeat):
                m.rename(r % args.k, f"Renamed {r}")
                t0 = time.perf_counter()
                save_grouping_state(store, m.saved_state(history=True))
                sync.append(time.perf_counter() - t0)

                m.rename(r % args.k, f"Renamed again {r}")
                t0 = time.perf_counter()
                state = m.saved_state(history=True)
                writes.submit(save_grouping_state, store, state)
                gui.append(time.perf_counter() - t0)
                writes.wait()
                background.append(time.perf_counter() - t0)
            assert writes.failed == 0
        finally:
            store.close()
    ms = {name: 1000 * statistics.median(v) for name, v in
          (("sync", sync), ("gui", gui), ("bg", background))}  # fmt: skip
    print(f"{args.n} photos, {args.k} groups, {len(m.undo_stack)} undo states; median of "
          f"{args.repeat} edits:")  # fmt: skip
    print(f"  written here (before):        {ms['sync']:7.1f} ms on the GUI thread")
    print(f"  GUI thread now:               {ms['gui']:7.1f} ms")
    print(f"  written in the background:    {ms['bg']:7.1f} ms (GUI thread free)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
