"""Duplicate groups from the tiered links of a duplicate search (the second half of
:mod:`engine.workflows.duplicates`).

Each photo is in one group at most:

1. components over the ``identical`` and ``same_photo`` links (union-find); a component
   whose members are all linked by identical files alone is an ``identical`` group, any
   other a ``same_photo`` group;
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

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TIERS", "DuplicateGroup", "group_links"]

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
    """

    paths: list[Path]
    scores: list[float]
    tier: str = "same_photo"
    related: list[tuple[Path, float]] = field(default_factory=list)


def group_links(
    links: dict[tuple[int, int], tuple[str, float]], paths: Sequence[Path]
) -> list[DuplicateGroup]:
    """Groups of rows from tiered links (the module docstring's two steps), with the
    related photos of the copy groups.

    Parameters
    ----------
    links : dict
        ``(i, j) -> (tier, score)`` for rows i < j, tier one of :data:`TIERS`.
    paths : sequence of Path
        Path of each row.

    Returns
    -------
    list of DuplicateGroup
        Strictest tier first, then largest first, then by representative path.
    """
    n = len(paths)
    copy_links = {p: v for p, v in links.items() if v[0] != "similar_shots"}
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
    out = [
        _group(members, own, paths, tier, near)
        for (members, own, tier), near in zip(copies, related, strict=True)
    ]
    for members, own in zip(comps, _links_of(comps, shots), strict=True):
        out.append(_group(members, own, paths, "similar_shots"))
    out.sort(key=lambda g: (TIERS.index(g.tier), -len(g.paths), str(g.paths[0])))
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
    )
