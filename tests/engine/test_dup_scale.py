"""The duplicate search at scale: candidates found block by block from the WTA bands,
pairs checked in worker processes, progress and cancel (engine.workflows.dup_candidates,
engine.workflows.dup_verify). Every shortcut gives the answer of the plain way."""

import shutil
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from engine.index import candidates as cand
from engine.workflows import dup_groups, dup_verify
from engine.workflows import duplicates as dup
from engine.workflows.dup_candidates import band_candidates, neighbour_pairs
from engine.workflows.dup_verify import VerifyInterrupted, verify_pairs
from engine.workflows.keeper import capture_time, suggest_keeper, suggest_keepers
from engine.workflows.pixels import PIXEL_SIDE, jpeg_facts, pixel_tests

cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def col(tmp_path_factory, demo_folder):
    """The demo photos, a few copies of them (a half-size re-export, a turn, a byte copy)."""
    from engine.collection import Collection

    root = tmp_path_factory.mktemp("dupscale")
    photos = root / "photos"
    photos.mkdir()
    for p in sorted(demo_folder.glob("*.jpg")):
        shutil.copy(p, photos / p.name)
    for name in ("brick", "coffee", "camera"):
        img = cv2.imread(str(demo_folder / f"{name}.jpg"))
        h, w = img.shape[:2]
        half = cv2.resize(img, (w // 2, h // 2), interpolation=cv2.INTER_AREA)
        cv2.imwrite(str(photos / f"{name}_small.jpg"), half, [cv2.IMWRITE_JPEG_QUALITY, 70])
        cv2.imwrite(str(photos / f"{name}_rot.png"), cv2.rotate(img, cv2.ROTATE_90_CLOCKWISE))
    shutil.copy(demo_folder / "coins.jpg", photos / "coins_again.jpg")
    c = Collection.open(photos, root / "idx")
    for _ in c.update(jobs=1):
        pass
    yield c
    c.close()


def _reference_pairs(searcher, data, k):
    """Every row's k best vocabulary neighbours the plain way: one query at a time."""
    n = len(data.ids)
    pairs = set()
    for i in range(n):
        kk, v = data.vocab.row(i)
        rows = None
        if n > cand.EXHAUSTIVE_LIMIT:
            q = SimpleNamespace(wta=data.wta[i : i + 1])
            rows = searcher.candidates("wta", q, data, cand.MIN_CANDIDATES)
        s = data.vocab.score(kk, v, rows)
        allr = np.arange(n) if rows is None else rows
        for j in allr[np.argsort(-s, kind="stable")[: min(n, k + 1)]]:
            if j != i:
                pairs.add((min(i, int(j)), max(i, int(j))))
    return np.array(sorted(pairs), np.int64).reshape(-1, 2)


@pytest.mark.parametrize("n_want", [3, 12, 200])  # (200: more than the rows: all of them)
def test_band_candidates_are_those_of_one_query_at_a_time(col, n_want):
    searcher = col.searcher
    _, data = searcher.ensure()
    n = len(data.ids)
    rows = np.arange(n)
    got = band_candidates(searcher, data, rows, n_want)
    for i in range(n):
        q = SimpleNamespace(wta=data.wta[i : i + 1])
        want = searcher.candidates("wta", q, data, n_want)
        np.testing.assert_array_equal(got[i], want)


@pytest.mark.parametrize("limit,want", [(10_000, 100), (0, 2), (0, 8)])
def test_neighbour_pairs_are_those_of_one_query_at_a_time(col, monkeypatch, limit, want):
    monkeypatch.setattr(cand, "EXHAUSTIVE_LIMIT", limit)  # 0: the WTA bands propose them
    monkeypatch.setattr(cand, "MIN_CANDIDATES", want)
    searcher = col.searcher
    _, data = searcher.ensure()
    ref = _reference_pairs(searcher, data, dup.DUPLICATE_NEIGHBOURS)
    seen = []
    got = neighbour_pairs(
        searcher, data, dup.DUPLICATE_NEIGHBOURS, progress=lambda d, t: seen.append((d, t))
    )
    np.testing.assert_array_equal(got, ref)
    assert seen[-1] == (len(data.ids), len(data.ids))


def _fields(ev):
    return (
        ev.n_matches, ev.n_inliers, ev.score, ev.overlap_fraction, ev.residual,
        ev.residual_px, ev.pixel_agreement, ev.taken_differ,
    )  # fmt: skip


def _same(a: dict, b: dict) -> bool:
    if list(a) != list(b):
        return False
    x = np.array([_fields(e) for e in a.values()], np.float64)
    y = np.array([_fields(e) for e in b.values()], np.float64)
    return np.array_equal(x, y, equal_nan=True)


def _slow_evidence(searcher, data, pairs, rule):
    """The evidence of each pair the plain way: both photos' features read for the pair,
    both files decoded for the pixel test, in this process, one pair at a time."""
    from engine.io.imageio import load_image

    paths = searcher.row_paths
    out = {}
    for i, j in pairs:
        fa = searcher.store.get_features(int(data.ids[i]))
        fb = searcher.store.get_features(int(data.ids[j]))
        if min(len(fa), len(fb)) < 4:
            continue
        ev = dup.pair_evidence(fa, fb)
        if ev.homography is not None and dup._same_geometry(ev, rule):
            ta, tb = capture_time(paths[i]), capture_time(paths[j])
            g = [
                load_image(str(p), max_side=PIXEL_SIDE).astype(np.float32)
                @ np.array([0.299, 0.587, 0.114], np.float32)
                for p in (paths[i], paths[j])
            ]
            differ = ta is not None and tb is not None and ta != tb
            # (two shots by their capture times are no copy whatever their pixels: the
            # search does not compare them)
            # (the pixel tests: the agreement, aligned again by the pixels when it falls
            # short by little, and then the compressed-copy test)
            band = (dup.COMPRESSED_FLOOR, rule.same_photo_pixels)
            facts = lambda i=i, j=j: (jpeg_facts(paths[i]), jpeg_facts(paths[j]))  # noqa: E731
            agree, comp = (
                (float("nan"), float("nan"))
                if differ
                else pixel_tests(
                    g[0],
                    g[1],
                    ev.homography,
                    fa.image_size,
                    fb.image_size,
                    facts,
                    band,
                    enough=rule.same_photo_compressed,
                )
            )
            ev = dup.dataclasses.replace(
                ev, pixel_agreement=agree, compressed_agreement=comp, taken_differ=differ
            )
        out[(i, j)] = ev
    return out


def test_evidence_and_groups_are_those_of_the_plain_way(col, monkeypatch):
    searcher = col.searcher
    _, data = searcher.ensure()
    skip = dup.identical_pairs(searcher)
    pairs = [
        p
        for p in map(tuple, _reference_pairs(searcher, data, dup.DUPLICATE_NEIGHBOURS).tolist())
        if p not in skip
    ]
    ref = _slow_evidence(searcher, data, pairs, dup.DEFAULT_RULE)
    assert sum(not np.isnan(e.pixel_agreement) for e in ref.values()) >= 3  # (pixels tested)
    # the search's own evidence: in this process, and in two worker processes
    (searcher.store.index_dir / "cache").mkdir(exist_ok=True)
    for workers in (0, 2):
        shutil.rmtree(searcher.store.index_dir / "cache")
        monkeypatch.setattr(dup_verify, "VERIFY_WORKERS", workers)
        monkeypatch.setattr(dup_verify, "PROCESS_MIN_PAIRS", 1)
        got = dup.neighbour_evidence(searcher, skip=skip)
        assert _same(got, ref), workers
    # and the groups, by the rule, from that evidence
    links = {p: ("identical", 1.0) for p in skip}
    for p, ev in ref.items():
        tier = dup.pair_tier(ev)
        if tier is not None:
            links[p] = (tier, ev.score)
    want = dup.group_links(links, searcher.row_paths)
    names = [(g.tier, {p.name for p in g.paths}) for g in want]
    assert any(t == "same_photo" and {"brick.jpg", "brick_rot.png", "brick_small.jpg"} <= g
               for t, g in names)  # fmt: skip
    assert any({"coins.jpg", "coins_again.jpg"} <= g for _, g in names)
    # the whole search, its pairs checked in this process or in two others
    monkeypatch.setattr(dup_verify, "VERIFY_WORKERS", 0)
    here = dup.find_duplicates(searcher, rule=dup.DEFAULT_RULE.with_threshold(0.1))
    monkeypatch.setattr(dup_verify, "VERIFY_WORKERS", 2)
    there = dup.find_duplicates(searcher, rule=dup.DEFAULT_RULE.with_threshold(0.1))
    assert [(g.tier, g.paths, g.scores) for g in here] == [
        (g.tier, g.paths, g.scores) for g in there
    ]


def _verify_setup(col):
    """(pairs of each row and its next 11 rows, the duplicate check, the keywords of
    :func:`verify_pairs` for ``col``)."""
    searcher = col.searcher
    _, data = searcher.ensure()
    n = len(data.ids)
    todo = [(i, j) for i in range(n) for j in range(i + 1, min(n, i + 12))]
    check = dup.functools.partial(dup._judge, pixel_rule=dup.DEFAULT_RULE)
    kw = dict(
        index_dir=searcher.store.index_dir,
        ids=np.asarray(data.ids),
        paths=searcher.row_paths,
        get_features=lambda r: searcher.store.get_features(int(data.ids[r])),
    )
    return todo, check, kw


def test_processes_give_the_answer_of_one_process(col):
    todo, check, kw = _verify_setup(col)
    one = verify_pairs(todo, check, workers=0, **kw)
    seen = []
    two = verify_pairs(todo, check, workers=2, chunk=16, progress=seen.append, **kw)
    assert len(todo) >= dup_verify.PROCESS_MIN_PAIRS  # (processes were used)
    assert len(one) == len(two) > 0
    assert _same(one, {p: two[p] for p in one})
    assert seen == sorted(seen) and seen[-1] == len(todo)


@pytest.mark.parametrize("workers", [0, 2])
def test_progress_is_reported_and_cancel_stops_within_a_second(col, workers):
    _, check, kw = _verify_setup(col)
    n = len(kw["ids"])
    todo = [(i, j) for i in range(n) for j in range(i + 1, n)]  # (every pair)
    cancel = threading.Event()
    when = []

    def progress(done):
        if len(when) == 1:  # after the second chunk
            cancel.set()
        when.append((done, time.monotonic()))

    t0 = time.monotonic()
    with pytest.raises(VerifyInterrupted) as err:
        verify_pairs(todo, check, workers=workers, chunk=8, cancel=cancel, progress=progress, **kw)
    stopped = time.monotonic()
    assert len(when) >= 2 and when[0][0] > 0
    assert stopped - when[1][1] < 1.0, stopped - t0
    assert 0 < len(err.value.done) < len(todo)  # (what was checked, for the pair cache)


def test_a_cancelled_search_raises_and_remembers_what_it_checked(col, monkeypatch):
    from engine.workflows.pair_cache import PairCache

    searcher = col.searcher
    shutil.rmtree(searcher.store.index_dir / "cache", ignore_errors=True)
    monkeypatch.setattr(dup, "DUPLICATE_BLOCK", 4)
    cancel = threading.Event()
    calls = []

    def progress(done, total):
        calls.append((done, total))
        if len(calls) == 3:
            cancel.set()

    with pytest.raises(InterruptedError):
        dup.find_duplicates(searcher, cancel=cancel, progress=progress)
    assert 0 < len(PairCache.load(searcher.store.index_dir)) < calls[-1][1]


def test_keepers_of_many_groups_in_processes_are_those_of_one_process(col, monkeypatch):
    from engine.workflows import keeper

    paths = [str(p) for p in col.searcher.row_paths]
    groups = [paths[i : i + 3] for i in range(0, len(paths) - 3)]
    monkeypatch.setattr(keeper, "KEEPERS_IN_PROCESSES", 1)
    many = suggest_keepers(groups, workers=2)
    assert many == [suggest_keeper(g) for g in groups]
    assert len({k.path for k in many}) > 10


def test_candidate_progress_is_reported_through_the_progress_object(col, monkeypatch):
    class Seen:
        def __init__(self):
            self.rows, self.pairs = [], []

        def __call__(self, done, total):
            self.pairs.append((done, total))

        def candidates(self, done, n):
            self.rows.append((done, n))

    monkeypatch.setattr(dup, "DUPLICATE_BLOCK", 64)
    seen = Seen()
    col.searcher.store.index_dir.joinpath("cache").mkdir(exist_ok=True)
    shutil.rmtree(col.searcher.store.index_dir / "cache")
    dup.find_duplicates(col.searcher, progress=seen)
    n = len(col.searcher.row_paths)
    assert seen.rows and seen.rows[-1] == (n, n)
    assert seen.pairs[0][0] == 0 and seen.pairs[-1][0] == seen.pairs[-1][1] > 0


def test_groups_of_many_links_are_those_of_the_plain_way():
    """group_links hands each group its own links (one pass, not one per group): the
    same groups as scanning every link for every group."""
    from pathlib import Path

    rng = np.random.default_rng(3)
    n = 300
    paths = [Path(f"/p/{i:03d}.jpg") for i in range(n)]
    links = {}
    for _ in range(150):
        i, j = sorted(rng.choice(n, 2, replace=False).tolist())
        tier = dup.TIERS[int(rng.integers(3))]
        links[(i, j)] = (tier, 1.0 if tier == "identical" else float(rng.random()))

    def plain(members, links_, tier):
        degree = {m: 0 for m in members}
        best = {m: 0.0 for m in members}
        for (i, j), (_t, sc) in links_.items():  # (every link, for every group)
            if i in degree and j in degree:
                degree[i] += 1
                degree[j] += 1
                best[i], best[j] = max(best[i], sc), max(best[j], sc)
        rep = max(members, key=lambda m: (degree[m], -m))
        rest = sorted((m for m in members if m != rep), key=lambda m: (-best[m], m))
        return [paths[rep]] + [paths[m] for m in rest], [1.0] + [min(1.0, best[m]) for m in rest]

    copies = {p: v for p, v in links.items() if v[0] != "similar_shots"}
    identical = {p for p, v in links.items() if v[0] == "identical"}
    strict = [set(c) for c in dup_groups._components(identical, n)]
    want, grouped = [], set()
    for members in dup_groups._components(set(copies), n):
        tier = "identical" if any(set(members) == c for c in strict) else "same_photo"
        want.append((tier, *plain(members, copies, tier)))
        grouped.update(members)
    shots = {
        p: v
        for p, v in links.items()
        if v[0] == "similar_shots" and p[0] not in grouped and p[1] not in grouped
    }
    for members in dup_groups._components(set(shots), n):
        want.append(("similar_shots", *plain(members, shots, "similar_shots")))
    got = dup.group_links(links, paths)
    assert len(got) == len(want) > 15
    assert sorted((g.tier, g.paths, g.scores) for g in got) == sorted(want)
    assert {g.tier for g in got} == set(dup.TIERS)


def test_gray_pixels_kept_stay_within_their_bytes_and_are_the_files(col, monkeypatch):
    searcher = col.searcher
    paths = searcher.row_paths
    first = dup_verify.PairContext(lambda r: None, paths).gray(0, PIXEL_SIDE)
    monkeypatch.setattr(dup_verify, "GRAY_CACHE_BYTES", 3 * first.nbytes)
    ctx = dup_verify.PairContext(lambda r: None, paths)
    for r in range(8):
        g = ctx.gray(r, PIXEL_SIDE)
        assert not g.flags.writeable
        assert ctx._gray_bytes <= max(dup_verify.GRAY_CACHE_BYTES, g.nbytes)
        assert ctx._gray_bytes == sum(x.nbytes for x in ctx._gray.values() if x is not None)
    assert 1 <= len(ctx._gray) < 8
    assert ctx.gray(7, PIXEL_SIDE) is ctx.gray(7, PIXEL_SIDE)  # (kept: the same array)
    assert np.array_equal(ctx.gray(0, PIXEL_SIDE), first)  # (read again, the same pixels)


@pytest.mark.parametrize("workers", [0, 2])
def test_pairs_streamed_in_blocks_give_the_answer_of_a_list(col, monkeypatch, workers):
    # blocks of pairs as the candidate search yields them (a pair may come again in a
    # later block) are checked while the next blocks are read: the answer of the list
    todo, check, kw = _verify_setup(col)
    one = verify_pairs(todo, check, workers=0, **kw)
    read = []

    def blocks():
        for s in [*range(0, len(todo), 50), 0]:  # (the first 50 pairs again at the end)
            read.append(s)
            yield np.array(todo[s : s + 50], np.int64)

    monkeypatch.setattr(dup_verify, "PROCESS_MIN_PAIRS", 100)
    seen = []
    streamed = verify_pairs(blocks(), check, workers=workers, chunk=16, progress=seen.append, **kw)
    assert len(read) == len(range(0, len(todo), 50)) + 1  # (every block read)
    assert set(one) - set(streamed) == set() and set(streamed) - set(one) == set()
    assert _same(one, {p: streamed[p] for p in one})
    assert seen == sorted(seen) and seen[-1] == len(todo) + 50


@pytest.mark.parametrize("workers", [0, 2])
def test_a_cancel_while_pairs_are_found_keeps_what_was_checked(col, monkeypatch, workers):
    todo, check, kw = _verify_setup(col)
    cancel = threading.Event()

    def blocks():  # (as neighbour_blocks: the cancel is noticed between blocks)
        for k, s in enumerate(range(0, len(todo), 40)):
            if cancel.is_set():
                raise InterruptedError("the duplicate search was cancelled")
            if k == 6:
                time.sleep(1.0)  # (the first blocks' pairs are checked meanwhile)
                cancel.set()
            yield np.array(todo[s : s + 40], np.int64)

    monkeypatch.setattr(dup_verify, "PROCESS_MIN_PAIRS", 100)
    with pytest.raises(VerifyInterrupted) as info:
        verify_pairs(blocks(), check, workers=workers, cancel=cancel, chunk=8, **kw)
    done = info.value.done
    assert set(done) <= set(todo[: 7 * 40])
    if workers == 0:  # (here: everything read before the cancel was checked)
        assert len(done) > 0
