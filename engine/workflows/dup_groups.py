"""Duplicate groups from the tiered links of a duplicate search (the second half of
:mod:`engine.workflows.duplicates`).

Each photo is in one group at most:

1. components over the ``identical`` and ``same_photo`` links (union-find); a component
   whose members are all linked by identical files alone is an ``identical`` group, any
   other a ``same_photo`` group. When the search also knows pairs that are *not* copies
   (``conflicts``: their pixels were compared and disagree, or their capture times
   differ), the links are joined strongest first (identical files, then by score), and a
   link that would join two sets of photos with more such pairs between them than links,
   one of them of two pictures of one size, is left out (it becomes a ``similar_shots``
   link; so is one that would join them with as many, one of which is sure: capture
   times that differ, see :func:`conflict_levels`; or as many, of one size, when one of
   its photos is linked far more precisely to the other side's conflicting photo, see
   :data:`TIE_PRECISION`; or at all, when the link is doubtful: its ends are linked
   far more precisely to photos that conflict, see :func:`consistent_links`). A crop
   of one shot lies within a second shot from the same spot and matches it as a copy
   would; the original and the other copies of that shot do not: the second shot stays
   out; so do two shots each cropped once, whose crops match both shots and each other.
   Copies that fail with one another (a heavily recompressed copy and a re-toned one; a
   crop and a reduced copy) still join their original;
2. ``similar_shots`` groups are the components of the ``similar_shots`` links among the
   photos left out of step 1 (a photo already in a group of copies is not listed again
   among shots: a clean-up acts on each group's copies, and a photo in two groups could
   be kept by one and moved away by the other).

A photo linked as a similar shot to a member of a copy group is not in that group, yet a
person looking at the copies wants to know about it (a heavily recompressed copy that
the same-photo test could not confirm, a second shot): it is listed with the copy group
as :attr:`DuplicateGroup.related` — whether it is in no group at all (linked as a shot
only to photos of copy groups) or in a group of shots of its own — shown beside the
group and never acted on by its clean-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.workflows.pixel_tiles import PIXEL_MOVED_CAP

__all__ = [
    "CONFLICT_ONE_SIZE",
    "CONFLICT_SHOT",
    "CONFLICT_SURE",
    "CONFLICT_WEAK",
    "TIERS",
    "DuplicateGroup",
    "conflict_levels",
    "consistent_links",
    "group_links",
    "reduced_copies",
]

#: How much a pair known not to be copies weighs (:func:`conflict_levels`): pictures of
#: two sizes; of one size whose pixels disagree; of one size whose pixels show another
#: shot (detail that moved, another framing); and two shots for sure (capture times).
CONFLICT_WEAK, CONFLICT_ONE_SIZE, CONFLICT_SHOT, CONFLICT_SURE = 0, 1, 2, 3

#: A tie (:func:`consistent_links`) goes to a photo's link whose residual is this many
#: times smaller than the link that would join it to a conflicting photo ...
TIE_PRECISION = 2.0
#: ... and smaller by this much (pixels): both precise to the detector's noise are alike.
#: (Chosen on a crop of one shot of each of 150 Holidays bursts, seeds 3-6: other shots
#: joining 16 -> 0 pairs over seeds 3-10, copies found unchanged; 1.5 split views of one
#: photo in the 10,000-photo library, 37 pairs; the duplicate benchmark's draws
#: unchanged.)
TIE_MARGIN_PX = 0.03

#: The tiers, strictest first.
TIERS: tuple[str, str, str] = ("identical", "same_photo", "similar_shots")


@dataclass(frozen=True)
class DuplicateGroup:
    """Duplicate images of one tier.

    Attributes
    ----------
    paths : list of Path
        The first is the group's representative (the image most linked to the others).
    scores : list of float
        Similarity of each path to the group (1.0 for the representative): its best link
        score (:attr:`PairEvidence.score`; byte-identical files score 1.0).
    tier : str
        One of :data:`TIERS`.
    related : list of (Path, float)
        (Copy groups only.) Photos outside the group that are similar shots of a member
        (in no group, or in a group of shots), with their best link score to the group,
        best first (see the module docstring). Not members: a clean-up of the group
        never touches them.
    apart : list of (Path, Path)
        (Copy groups only.) Pairs of members the search found *not* to be copies of
        each other (pixels of one size compared and disagreeing, or capture times that
        differ), joined only through other members: two shots from one spot, each with
        a crop that passes as a copy of both. A clean-up never moves a photo apart from
        the copy it keeps (:func:`engine.workflows.cleanup.plan_cleanup`).
    """

    paths: list[Path]
    scores: list[float]
    tier: str = "same_photo"
    related: list[tuple[Path, float]] = field(default_factory=list)
    apart: list[tuple[Path, Path]] = field(default_factory=list)


def group_links(
    links: dict[tuple[int, int], tuple[str, float]],
    paths: Sequence[Path],
    conflicts: Mapping[tuple[int, int], int] | None = None,
    residuals: Mapping[tuple[int, int], float] | None = None,
) -> list[DuplicateGroup]:
    """Groups of rows from tiered links (the module docstring's two steps), with the
    related photos of the copy groups.

    Parameters
    ----------
    links : dict
        ``(i, j) -> (tier, score)`` for rows i < j, tier one of :data:`TIERS`.
    paths : sequence of Path
        Path of each row.
    conflicts : mapping, optional
        ``(i, j) -> level`` (:func:`conflict_levels`) for rows i < j known not to be
        copies of one photo (not linked as copies: their pixels were compared and
        disagree, or their capture times differ). A copy link between two sets of linked
        photos is left out (made a ``similar_shots`` link) when the sets have more
        conflicting pairs between them than copy links, one of them of one size, or as
        many with a sure one (:func:`consistent_links`). None: the components of the
        links as they are.
    residuals : mapping, optional
        ``(i, j) -> residual_px`` (:attr:`~engine.workflows.duplicates.PairEvidence.
        residual_px`; 0 for a reduced copy of the whole picture, :func:`reduced_copies`)
        of the copy links that may settle a tie (:func:`consistent_links`).

    Returns
    -------
    list of DuplicateGroup
        Strictest tier first, then largest first, then by representative path.
    """
    n = len(paths)
    copy_links = {p: v for p, v in links.items() if v[0] != "similar_shots"}
    if conflicts:
        copy_links, left_out = consistent_links(copy_links, conflicts, residuals)
        links = {**links, **{p: ("similar_shots", links[p][1]) for p in left_out}}
    strict = _components({p for p, v in links.items() if v[0] == "identical"}, n)
    strict_sets = {frozenset(c) for c in strict}
    copies, grouped = [], {}
    comps = _components(set(copy_links), n)
    for members, own in zip(comps, _links_of(comps, copy_links), strict=True):
        tier = "identical" if frozenset(members) in strict_sets else "same_photo"
        copies.append((members, own, tier))
        grouped.update((m, len(copies) - 1) for m in members)
    shot_links = {p: v for p, v in links.items() if v[0] == "similar_shots"}
    shots = {p: v for p, v in shot_links.items() if p[0] not in grouped and p[1] not in grouped}
    comps = _components(set(shots), n)
    related: list[dict[int, float]] = [{} for _ in copies]
    for (i, j), (_t, sc) in shot_links.items():
        for a, b in ((i, j), (j, i)):  # a in a copy group, b outside it
            if a in grouped and grouped.get(b) != grouped[a]:
                near = related[grouped[a]]
                near[b] = max(near.get(b, 0.0), sc)
    apart = _apart(grouped, len(copies), conflicts, paths)
    out = [
        _group(members, own, paths, tier, near, far)
        for (members, own, tier), near, far in zip(copies, related, apart, strict=True)
    ]
    for members, own in zip(comps, _links_of(comps, shots), strict=True):
        out.append(_group(members, own, paths, "similar_shots"))
    out.sort(key=lambda g: (TIERS.index(g.tier), -len(g.paths), str(g.paths[0])))
    return out


def conflict_levels(
    conflicts: Mapping[tuple[int, int], Any],
    links: Mapping[tuple[int, int], tuple[str, float]],
    size_of: Callable[[int], tuple[int, int] | None],
) -> dict[tuple[int, int], int]:
    """How much each pair known not to be copies weighs against joining its photos
    (:func:`group_links`).

    Parameters
    ----------
    conflicts : mapping
        ``(i, j) -> PairEvidence`` (:class:`~engine.workflows.duplicates.PairEvidence`)
        of pairs not linked as copies whose pixels were compared and failed the
        same-photo test, or whose capture times differ.
    links : mapping
        The tiered links (:func:`group_links`): only pairs of rows that both have copy
        links are kept (the others cannot join a group of copies), and not a pair
        linked as copies after all (by its appearance, or a RAW file and its JPEG).
    size_of : callable
        ``size_of(row) -> (width, height)`` of the row's picture, or None.

    Returns
    -------
    dict
        ``(i, j) -> level``: :data:`CONFLICT_SURE` for capture times that differ (two
        shots for certain); :data:`CONFLICT_SHOT` for pictures of one size (either way
        round) whose pixels show another shot: detail that moved (an agreement of
        :data:`~engine.workflows.pixel_tiles.PIXEL_MOVED_CAP` or less) or another
        framing (0); :data:`CONFLICT_ONE_SIZE` for the others of one size (an agreement
        just short of the rule's: a copy may fail so, 0.946 for a copy of Holidays'
        127200 turned by 2.2 degrees);
        :data:`CONFLICT_WEAK` for pictures of two sizes (a crop and a reduced copy of
        one photo fail with each other: the crop holds detail the reduced copy lost).
        Other framings of one size are not sure: two cuts of one photo exported at one
        size are that too (the 10,000-photo library's views, 320x240 each: making them
        sure split the views of a photo into more groups, ``bench_duplicates.py``,
        seventh round).
    """
    copied = {r for p, (t, _s) in links.items() if t != "similar_shots" for r in p}
    out = {
        p: ev
        for p, ev in conflicts.items()
        if p[0] in copied
        and p[1] in copied
        and links.get(p, ("similar_shots",))[0] == "similar_shots"
    }
    sizes = {r: size_of(r) for r in {r for p, ev in out.items() if not ev.taken_differ for r in p}}

    def level(i: int, j: int, ev: Any) -> int:
        a, b = sizes[i], sizes[j]
        if ev.taken_differ:
            return CONFLICT_SURE
        if not (a and b and sorted(a) == sorted(b)):
            return CONFLICT_WEAK
        return CONFLICT_SHOT if ev.pixel_agreement <= PIXEL_MOVED_CAP else CONFLICT_ONE_SIZE

    return {p: level(*p, ev) for p, ev in out.items()}


def reduced_copies(
    pairs: Sequence[tuple[int, int]], size_of: Callable[[int], tuple[int, int] | None]
) -> list[tuple[int, int]]:
    """The copy links, among ``pairs`` that keep one frame, between pictures of two sizes:
    a reduced copy of the whole picture, given a residual of 0 by
    :func:`~engine.workflows.duplicates.find_duplicates` (:func:`consistent_links`).

    A reduced copy holds nothing its original lacks: it is no more a copy of a third
    picture than its original is (a 60 % re-export of 123000 of the walk folder passes
    as a copy of 123001, a second shot from nearly the same spot that 123000 is not a
    copy of: at its size, the parallax no longer shows). A copy of one size that keeps
    the frame (re-toned, blurred, recompressed, turned by quarter turns) is not such a
    twin: its edit may be why it fails with a third picture (a re-toned copy and a copy
    turned by a few degrees fail with each other), so it has no residual.

    Parameters
    ----------
    pairs : sequence of (int, int)
        Copy links whose pictures keep one frame.
    size_of : callable
        ``size_of(row) -> (width, height)`` of the row's picture, or None.

    Returns
    -------
    list of (int, int)
    """
    out = []
    for i, j in pairs:
        a, b = size_of(i), size_of(j)
        if a and b and sorted(a) != sorted(b):
            out.append((i, j))
    return out


def consistent_links(
    links: Mapping[tuple[int, int], tuple[str, float]],
    conflicts: Mapping[tuple[int, int], int],
    residuals: Mapping[tuple[int, int], float] | None = None,
) -> tuple[dict[tuple[int, int], tuple[str, float]], set[tuple[int, int]]]:
    """The copy links kept and those left out, given pairs known not to be copies.

    The links are taken strongest first: ``identical`` ones (the same bytes: always
    kept), then the others by score, highest first (then by pair), the doubtful ones
    last. A link is doubtful when one of its ends is linked :data:`TIE_PRECISION` times
    (and :data:`TIE_MARGIN_PX`) more precisely to a photo known to be another shot than
    the other end, or than a photo it is linked to that precisely (one size, or sure;
    :data:`CONFLICT_SHOT` for an exact, assumed residual: :func:`_needed`;
    ``residuals``): two shots from one spot each cropped once, whose crops pass as
    copies of both shots and of each other, but agree with their own shot to the
    detector's precision and with the other only as well as the two shots agree. A
    doubtful link is left out when the two sets it would join hold a conflict (one size,
    or sure) between them, however many links join them (the crops' links would
    outnumber the one conflict between the shots). Each link joins two sets
    of rows (union-find); it is left out when between the two sets there are more
    conflicting pairs than links (of all ``links``, this one included) and one of them is
    of two pictures of one size, or as many with a sure one (:func:`conflict_levels`), or
    as many when one of its photos already has a link :data:`TIE_PRECISION` times (and
    :data:`TIE_MARGIN_PX`) more precise to a photo that conflicts, one size (or
    :data:`CONFLICT_SHOT` for an exact, assumed residual), with one on the other side
    (``residuals``; a crop of one shot passes as a copy of a second shot from the same
    spot, but its features agree with its own shot to the detector's precision). Links
    within one set are kept. A greedy correlation clustering: on the duplicate
    benchmark's development draws (``tests/benchmarks/bench_duplicates.py``, seventh
    round) it kept every true copy link and left out every crop of one shot that matched
    a second shot.

    Parameters
    ----------
    links : mapping
        ``(i, j) -> (tier, score)`` of the copy links (tier ``identical`` or
        ``same_photo``), rows i < j.
    conflicts : mapping
        ``(i, j) -> level`` (:func:`conflict_levels`).
    residuals : mapping, optional
        ``(i, j) -> residual_px`` of copy links, in pixels (links without one never
        settle a tie, nor are left out by one: appearance links, a RAW file and its
        JPEG, copies of one size that keep their frame, whose residual tells an edit,
        not a second shot). A reduced copy of the whole picture has 0
        (:func:`reduced_copies`): its links are never left out by a tie, and outmatch
        its links to a photo that conflicts with its original.

    Returns
    -------
    kept : dict
        The links kept, as given.
    left_out : set of (int, int)
    """
    adj: dict[int, set[int]] = {}
    bad: dict[int, dict[int, int]] = {}
    for i, j in links:
        adj.setdefault(i, set()).add(j)
        adj.setdefault(j, set()).add(i)
    for (i, j), level in conflicts.items():
        if i in adj and j in adj:  # (only rows with copy links can be joined)
            bad.setdefault(i, {})[j] = int(level)
            bad.setdefault(j, {})[i] = int(level)
    root = {r: r for r in adj}
    members = {r: [r] for r in adj}
    doubtful = _doubtful(links, bad, residuals)
    order = sorted(
        links, key=lambda p: (links[p][0] != "identical", p in doubtful, -links[p][1], p)
    )
    kept, left_out = {}, set()
    near: dict[int, dict[int, float]] = {}  # row -> {row: residual} of the kept links
    for i, j in order:
        ri, rj = root[i], root[j]
        if ri != rj:
            small, big = (ri, rj) if len(members[ri]) <= len(members[rj]) else (rj, ri)
            if links[(i, j)][0] != "identical":
                pos = sum(root[y] == big for x in members[small] for y in adj[x])
                against = {(x, y): s for x in members[small] for y, s in bad.get(x, {}).items()
                           if root[y] == big}  # fmt: skip
                most = max(against.values(), default=CONFLICT_WEAK)
                if (
                    ((i, j) in doubtful and most >= CONFLICT_ONE_SIZE)
                    or (len(against) > pos and most >= CONFLICT_ONE_SIZE)
                    or (against and len(against) == pos and most == CONFLICT_SURE)
                    or (
                        against
                        and len(against) == pos
                        and _outmatched((i, j), against, near, residuals)
                    )
                ):
                    left_out.add((i, j))
                    continue
            for x in members[small]:
                root[x] = big
            members[big] += members.pop(small)
        kept[(i, j)] = links[(i, j)]
        r = residuals.get((i, j)) if residuals else None
        if r is not None:
            near.setdefault(i, {})[j] = r
            near.setdefault(j, {})[i] = r
    return kept, left_out


def _outmatched(
    pair: tuple[int, int],
    against: Mapping[tuple[int, int], int],
    near: Mapping[int, Mapping[int, float]],
    residuals: Mapping[tuple[int, int], float] | None,
) -> bool:
    """Whether the copy link ``pair`` (a tie: as many conflicting pairs as links between
    the two sets it would join) is outmatched: one of its photos is already linked, far
    more precisely, to a photo that conflicts (one size; :func:`_needed`) with the other
    side.

    A crop of one shot lies within a second shot from the same spot and passes as its
    copy, but its features agree with its own shot to the detector's precision and with
    the other shot only as well as the two shots agree with each other (the parallax and
    movement between them: 122600, its crop and 122602 of the walk folder, 0.02 px
    against 0.15 px). A photo is a copy of one of two pictures that are not copies of
    each other, so the tie goes to the link that agrees :data:`TIE_PRECISION` times
    better, by :data:`TIE_MARGIN_PX` at least.
    """
    if not residuals:
        return False
    r = residuals.get(pair)
    if r is None or not r == r:  # (no residual: an appearance or RAW link)
        return False
    bad_far: dict[int, int] = {}
    for (x, y), level in against.items():
        for z in (x, y):
            bad_far[z] = max(bad_far.get(z, CONFLICT_WEAK), level)
    best = min(
        (
            rz
            for end in pair
            for z, rz in near.get(end, {}).items()
            if bad_far.get(z, CONFLICT_WEAK) >= _needed(rz)
        ),
        default=float("inf"),
    )
    return _far_more(r, best)


def _needed(rz: float, *more: float) -> int:
    """The least conflict level an anchor linked with residual ``rz`` (and ``more``)
    overrules with: one size for a measured residual; :data:`CONFLICT_SHOT` for an exact
    (0) one, a reduced copy's, assumed rather than measured (:func:`reduced_copies`):
    pixels just short of the rule's may be a copy's (Holidays' 127200 and its copy turned
    by 2.2 degrees, 0.946, joined through a reduced copy of 127200)."""
    return CONFLICT_SHOT if 0.0 in (rz, *more) else CONFLICT_ONE_SIZE


def _doubtful(
    links: Mapping[tuple[int, int], tuple[str, float]],
    bad: Mapping[int, Mapping[int, int]],
    residuals: Mapping[tuple[int, int], float] | None,
) -> set[tuple[int, int]]:
    """The copy links outmatched at both ends' anchors (:func:`consistent_links`).

    A row's anchors for its link of residual ``r`` are the row itself and the rows it is
    linked to :data:`TIE_PRECISION` times (and :data:`TIE_MARGIN_PX`) more precisely. A
    link is doubtful when an anchor of one end is known not to be a copy of an anchor of
    the other (one size, or sure; :func:`_needed`): two shots from one spot A and
    C, a crop B of A and a crop D of C; B agrees with A to 0.02 px, with C and with D to
    0.13-0.15 px, as A and C agree with each other (the walk folder's 122600 and 122601
    with their crops).
    """
    if not residuals:
        return set()
    precise: dict[int, list[tuple[int, float]]] = {}
    for (i, j), r in residuals.items():
        if (i, j) in links and r == r:  # (not nan)
            precise.setdefault(i, []).append((j, r))
            precise.setdefault(j, []).append((i, r))
    out = set()
    for (i, j), r in residuals.items():
        if (i, j) not in links or not r == r:
            continue
        anchors = [
            {x: r} | {z: rz for z, rz in precise.get(x, ()) if _far_more(r, rz)} for x in (i, j)
        ]  # (row -> the residual that makes it an anchor; the end itself: the link's)
        if any(
            bad.get(a, {}).get(b, CONFLICT_WEAK) >= _needed(ra, rb)
            for a, ra in anchors[0].items()
            for b, rb in anchors[1].items()
        ):
            out.add((i, j))
    return out


def _far_more(r: float, best: float) -> bool:
    """Whether a residual ``best`` is far more precise than ``r`` (:data:`TIE_PRECISION`,
    :data:`TIE_MARGIN_PX`)."""
    return r >= TIE_PRECISION * best and r - best >= TIE_MARGIN_PX


def _apart(
    grouped: Mapping[int, int],
    n_groups: int,
    conflicts: Mapping[tuple[int, int], int] | None,
    paths: Sequence[Path],
) -> list[list[tuple[Path, Path]]]:
    """For each of ``n_groups`` copy groups (``grouped``: row -> group), the pairs of its
    members with a conflict of one size or a sure one (not weak: a crop and a reduced
    copy of one photo fail with each other); one pass over the conflicts."""
    out: list[list[tuple[Path, Path]]] = [[] for _ in range(n_groups)]
    for (i, j), level in sorted((conflicts or {}).items()):
        k = grouped.get(i)
        if level >= CONFLICT_ONE_SIZE and k is not None and grouped.get(j) == k:
            out[k].append((paths[i], paths[j]))
    return out


def _components(pairs: set[tuple[int, int]], n: int) -> list[list[int]]:
    """Connected components (of 2 rows or more) of the rows linked by ``pairs``."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in pairs:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    comps: dict[int, list[int]] = {}
    for i, j in pairs:
        for r in (i, j):
            comps.setdefault(find(r), [])
    for r in range(n):
        root = find(r)
        if root in comps:
            comps[root].append(r)
    return [m for m in comps.values() if len(m) > 1]


def _links_of(
    comps: list[list[int]], links: dict[tuple[int, int], tuple[str, float]]
) -> list[dict[tuple[int, int], tuple[str, float]]]:
    """The ``links`` within each of the components ``comps`` (one pass over the links,
    not one per component: a library of 100,000 photos has thousands of groups)."""
    comp_of = {m: k for k, members in enumerate(comps) for m in members}
    out: list[dict[tuple[int, int], tuple[str, float]]] = [{} for _ in comps]
    for (i, j), v in links.items():
        k = comp_of.get(i)
        if k is not None and comp_of.get(j) == k:
            out[k][(i, j)] = v
    return out


def _group(
    members: list[int],
    links: dict[tuple[int, int], tuple[str, float]],
    paths: Sequence[Path],
    tier: str,
    related: dict[int, float] | None = None,
    apart: list[tuple[Path, Path]] | None = None,
) -> DuplicateGroup:
    """One group: the representative (most links, then lowest row) first, the others by
    best link score; ``related`` (row -> best score) best first, then by row."""
    degree = {m: 0 for m in members}
    best = {m: 0.0 for m in members}
    for (i, j), (_t, sc) in links.items():
        if i in degree and j in degree:
            degree[i] += 1
            degree[j] += 1
            best[i] = max(best[i], sc)
            best[j] = max(best[j], sc)
    rep = max(members, key=lambda m: (degree[m], -m))
    rest = sorted((m for m in members if m != rep), key=lambda m: (-best[m], m))
    near = sorted((related or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    return DuplicateGroup(
        [paths[rep]] + [paths[m] for m in rest],
        [1.0] + [float(min(1.0, best[m])) for m in rest],
        tier,
        [(paths[r], float(min(1.0, sc))) for r, sc in near],
        apart or [],
    )
