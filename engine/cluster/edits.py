"""The person's edits of a grouping: move an image, merge groups, split a group, rename.

The app's Categories view and any other front end edit a grouping through these functions:

- :class:`EditableGrouping` is a grouping as it is shown and edited: members ordered
  prototypes first, outliers last, else by decreasing flow, and the names the person gave
  (stored in the index by :func:`engine.cluster.grouping.save_edits`);
- a drag moves the photo and nothing else (:func:`move_edit`), and becomes must-group /
  cannot-group constraints kept for the next normalized cut, when the person asks for one
  (:func:`move_constraints`, :func:`pairs_to_rows`; thesis Sec. 9.2);
- merging acts on the labels directly (:func:`merge_groups`, :func:`merge_edit`; without the
  folder's affinities the flows are rescaled, :func:`merge_ranks`);
- splitting is a two-way normalized cut of the group's own affinities
  (:func:`split_group` on a kernel, :func:`split_group_iter` on the collection's cached
  dense channel, Nystrom inside a large group; :func:`split_edit` applies it);
- the names follow the groups across re-groupings and edits (:func:`carry_names`).

:func:`category_affinities_iter` recomputes the (n, n) affinities the edits rank on (after
a restart) from the cached dense channel.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from engine.cluster import pipeline
from engine.cluster.constraints import relabel_by_size
from engine.cluster.model import category_model_iter
from engine.cluster.ncut import choose_landmarks
from engine.cluster.partition import discover_categories
from engine.cluster.ranking import rank_groups
from engine.cluster.results import Clustering, ClusterProgress

__all__ = [
    "SPLIT_LANDMARKS",
    "SPLIT_NYSTROM_MIN",
    "EditableGrouping",
    "SplitResult",
    "carry_names",
    "category_affinities_iter",
    "compact_labels",
    "keep_order_labels",
    "merge_edit",
    "merge_groups",
    "merge_ranks",
    "move_constraints",
    "move_edit",
    "pairs_to_rows",
    "rebase_grouping",
    "split_edit",
    "split_group",
    "split_group_iter",
]

#: A group with more members than this is split on Nystrom columns of
#: :data:`SPLIT_LANDMARKS` sampled members instead of its exact (m, m) affinities.
SPLIT_NYSTROM_MIN = 3000
SPLIT_LANDMARKS = 500


def keep_order_labels(labels: np.ndarray) -> np.ndarray:
    """Renumber labels to ``0..k-1`` (empty groups removed) keeping their order: the
    groups of a person's grouping stay where they are after an edit.

    Parameters
    ----------
    labels : (n,) int

    Returns
    -------
    (n,) int64
    """
    labels = np.asarray(labels)
    if labels.size == 0:
        return labels.astype(np.int64)
    return np.unique(labels, return_inverse=True)[1].reshape(-1).astype(np.int64)


def compact_labels(labels: np.ndarray) -> np.ndarray:
    """Renumber labels to ``0..k-1`` (empty groups removed), largest group first.

    Ties between groups of one size keep the order of their old labels (unlike
    :func:`engine.cluster.constraints.relabel_by_size`, which orders them by first member).

    Parameters
    ----------
    labels : (n,) int

    Returns
    -------
    (n,) int64
    """
    if labels.size == 0:
        return labels.astype(np.int64)
    _, inv, counts = np.unique(labels, return_inverse=True, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inv].astype(np.int64)


@dataclass
class EditableGrouping:
    """A grouping of a collection's photos as it is shown and edited.

    Attributes
    ----------
    paths : list of str
        The photos, in the collection's row order.
    labels : (n,) int64
        Group of every photo, in ``[0, k)``.
    flow, prototypes, outliers : (n,) float64 / bool / bool
        From :func:`engine.cluster.rank_groups` (Sec. 9.4).
    k_reason : str
        Why this number of groups (from :attr:`engine.cluster.Clustering.k_reason`).
    names : dict int -> str
        User-given group names (missing: "Group g+1").
    """

    paths: list[str]
    labels: np.ndarray
    flow: np.ndarray
    prototypes: np.ndarray
    outliers: np.ndarray
    k_reason: str = ""
    names: dict[int, str] = field(default_factory=dict)

    @property
    def k(self) -> int:
        """Number of groups (0 for no photos)."""
        return int(self.labels.max()) + 1 if self.labels.size else 0

    def name(self, g: int) -> str:
        """The name of group ``g``: the person's, else ``"Group g+1"``."""
        return self.names.get(int(g)) or f"Group {int(g) + 1}"

    def members(self, g: int) -> np.ndarray:
        """Rows of group ``g``: prototypes first, outliers last, else by decreasing flow:
        (m,) int64."""
        idx = np.flatnonzero(self.labels == g)
        key = np.lexsort((-self.flow[idx], self.outliers[idx], ~self.prototypes[idx]))
        return idx[key]

    def group_of(self, path: str) -> int:
        """The group of photo ``path``."""
        return int(self.labels[self.paths.index(str(path))])

    def to_clustering(self) -> Clustering:
        """The grouping as a :class:`engine.cluster.Clustering` (no eigenvalues)."""
        return Clustering(
            labels=self.labels,
            k=self.k,
            k_reason=self.k_reason,
            eigenvalues=np.zeros(0),
            flow=self.flow,
            prototypes=self.prototypes,
            outliers=self.outliers,
        )

    @classmethod
    def from_labels(
        cls,
        paths: Sequence[str],
        labels: np.ndarray,
        K: np.ndarray,
        k_reason: str = "",
        names: dict[int, str] | None = None,
    ) -> EditableGrouping:
        """Rank a label vector on the affinities ``K`` (n, n) float64: flow, prototypes,
        outliers (:func:`engine.cluster.rank_groups`); labels compacted
        (:func:`compact_labels`)."""
        labels = compact_labels(np.asarray(labels, np.int64))
        flow, protos, outl = rank_groups(K, labels)
        return cls(list(paths), labels, flow, protos, outl, k_reason, dict(names or {}))

    @classmethod
    def from_grouping(cls, grouping: Any, k_reason: str | None = None) -> EditableGrouping:
        """The grouping of :func:`engine.cluster.group_collection_iter` (or
        :func:`engine.cluster.load_grouping`) as shown: labels compacted, a missing flow
        (indexes grouped before flows were stored) read as zeros."""
        n = len(grouping.paths)
        flow = grouping.flow
        if flow is None or np.ndim(flow) == 0:
            flow = np.zeros(n)
        return cls(
            [str(p) for p in grouping.paths], compact_labels(grouping.labels), flow,
            grouping.prototypes, grouping.outliers,
            grouping.k_reason if k_reason is None else k_reason,
        )  # fmt: skip


def carry_names(
    old_paths: Sequence[str],
    old_labels: np.ndarray,
    old_names: dict[int, str],
    new_paths: Sequence[str],
    new_labels: np.ndarray,
    *,
    skip: Iterable[str] = (),
) -> dict[int, str]:
    """Names for the groups of a new grouping, taken from the old one.

    Each new group gets the name of the old group it overlaps most (one-to-one, Hungarian
    assignment on the member overlap), so renamed groups keep their names across
    re-groupings. Old groups named one of ``skip`` take no part: a grouping made afresh
    has no "To review" group (:data:`engine.cluster.REVIEW_NAME`), and the photos it held
    must not keep another group from its name.

    Parameters
    ----------
    old_paths, new_paths : sequence of str
        The photos of both groupings (matched by path).
    old_labels, new_labels : (n_old,), (n_new,) int
    old_names : dict int -> str
        Names of old groups.

    Returns
    -------
    dict int -> str
        Names of new groups (only groups that overlap a named old group).
    """
    skip = set(skip)
    skipped = {g for g, n in old_names.items() if n in skip}
    old_names = {g: n for g, n in old_names.items() if g not in skipped}
    if not old_names:
        return {}
    from scipy.optimize import linear_sum_assignment

    row = {p: i for i, p in enumerate(old_paths)}
    new_labels = np.asarray(new_labels, np.int64)
    common = [(row[p], j) for j, p in enumerate(new_paths) if p in row]
    if not common:
        return {}
    oi, nj = np.array(common, np.int64).T
    a = np.asarray(old_labels, np.int64)[oi]
    b = new_labels[nj]
    ov = np.zeros((a.max() + 1, b.max() + 1), np.int64)
    np.add.at(ov, (a, b), 1)
    ov[[g for g in skipped if g < ov.shape[0]]] = 0  # (they take no new group)
    r, c = linear_sum_assignment(-ov)
    return {int(cc): old_names[int(rr)] for rr, cc in zip(r, c, strict=True)
            if ov[rr, cc] > 0 and int(rr) in old_names}  # fmt: skip


def rebase_grouping(old: EditableGrouping, current: EditableGrouping) -> EditableGrouping:
    """An earlier state of a grouping (an undo step) brought onto today's photos.

    Photos were added or removed since ``old`` was kept: the photos of ``current`` that
    ``old`` has keep their ``old`` group, rank and name; removed photos leave; each photo
    ``old`` lacks (placed since) joins the ``old`` group that holds most of the photos it
    is grouped with in ``current`` (a majority vote, ties to the lower group), or, when
    none of them is in ``old`` (e.g. the "To review" group of new photos), a group of its
    own named as in ``current``. Undoing an edit made before new photos arrived then
    undoes that edit only: the new photos stay placed.

    Parameters
    ----------
    old, current : EditableGrouping

    Returns
    -------
    EditableGrouping
        Rows in the order of ``current.paths`` (so affinities of ``current`` apply); its
        groups keep ``old``'s order, then the new groups (:func:`keep_order_labels`).
    """
    row = {p: i for i, p in enumerate(old.paths)}
    n = len(current.paths)
    cur_labels = np.asarray(current.labels, np.int64)
    in_old = np.array([p in row for p in current.paths], bool)
    take = np.array([row[p] for p in current.paths if p in row], np.int64)
    old_labels = np.asarray(old.labels, np.int64)
    labels = np.full(n, -1, np.int64)
    labels[in_old] = old_labels[take]
    flow = np.asarray(current.flow, np.float64).copy()
    prototypes = np.asarray(current.prototypes, bool).copy()
    outliers = np.asarray(current.outliers, bool).copy()
    flow[in_old] = np.asarray(old.flow, np.float64)[take]
    prototypes[in_old] = np.asarray(old.prototypes, bool)[take]
    outliers[in_old] = np.asarray(old.outliers, bool)[take]
    names = {g: old.names[g] for g in np.unique(labels[in_old]).tolist() if g in old.names}
    fresh: dict[int, int] = {}  # a current group none of whose photos old has -> new label
    for c in np.unique(cur_labels[~in_old]).tolist():
        votes = labels[in_old & (cur_labels == c)]
        rows = np.flatnonzero(~in_old & (cur_labels == c))
        if votes.size:
            labels[rows] = int(np.bincount(votes).argmax())
        else:
            fresh[c] = int(old_labels.max(initial=-1)) + 1 + len(fresh)
            labels[rows] = fresh[c]
            if c in current.names:
                names[fresh[c]] = current.names[c]
    order = np.unique(labels)  # keep_order_labels renumbers in this order
    renumber = {int(g): i for i, g in enumerate(order)}
    return EditableGrouping(
        list(current.paths), keep_order_labels(labels), flow, prototypes, outliers,
        old.k_reason, {renumber[g]: name for g, name in names.items() if g in renumber},
    )  # fmt: skip


def pairs_to_rows(paths: Sequence[str], pairs: Iterable[Sequence[str]]) -> list[tuple[int, int]]:
    """Path pairs (the person's constraints) as row pairs of ``paths``.

    Parameters
    ----------
    paths : sequence of str
        The photos, in row order.
    pairs : iterable of (str, str)
        Must-group or cannot-group path pairs.

    Returns
    -------
    list of (int, int)
        Rows of each pair, in order; pairs naming a photo not in ``paths`` are dropped.
    """
    row = {p: i for i, p in enumerate(paths)}
    return [(row[a], row[b]) for a, b in pairs if a in row and b in row]


def move_constraints(
    clustering: Clustering, image: int, group: int, *, n_anchors: int = 3
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Constraints expressing "image belongs to ``group``" (a drag in the Categories view).

    Returns ``(must, cannot)``: ``image`` must group with the ``n_anchors`` highest-flow
    members of ``group`` and cannot group with those of its current group. ``group`` may
    be ``clustering.k``, a new group of its own: then only the cannot-links. Add them to
    the user's accumulated constraints and call :func:`discover_categories` again.
    """
    if not 0 <= image < clustering.n:
        raise ValueError(f"image must be in [0, {clustering.n}), got {image}")
    if not 0 <= group <= clustering.k:
        raise ValueError(f"group must be in [0, {clustering.k}], got {group}")
    members = clustering.members(group) if group < clustering.k else []
    target = [int(j) for j in members if j != image][:n_anchors]
    must = [(image, j) for j in target]
    old = int(clustering.labels[image])
    cannot = []
    if old != group:
        cannot = [(image, int(j)) for j in clustering.members(old) if j != image][:n_anchors]
    return must, cannot


def merge_groups(labels: np.ndarray, groups: Sequence[int]) -> np.ndarray:
    """Labels (n,) int64 with ``groups`` merged into one; groups renumbered by size."""
    labels = np.asarray(labels, dtype=np.int64).copy()
    groups = [int(g) for g in groups]
    if len(groups) < 2:
        raise ValueError("groups must name at least two groups to merge")
    labels[np.isin(labels, groups)] = groups[0]
    return relabel_by_size(labels)


def split_group(kernel: np.ndarray, labels: np.ndarray, group: int, **kwargs: Any) -> np.ndarray:
    """Labels (n,) int64 with ``group`` cut in two by a normalized cut of its own
    affinities (``kwargs`` go to :func:`discover_categories`, ``k`` defaults to 2)."""
    labels = np.asarray(labels, dtype=np.int64).copy()
    idx = np.flatnonzero(labels == group)
    if idx.size < 2:
        raise ValueError(f"group {group} has {idx.size} member(s); cannot split it")
    K = np.asarray(kernel, dtype=np.float64)
    kwargs.setdefault("k", 2)
    sub = discover_categories(K[np.ix_(idx, idx)], **kwargs)
    labels[idx[sub.labels > 0]] = labels.max() + 1 + sub.labels[sub.labels > 0] - 1
    return relabel_by_size(labels)


def merge_ranks(
    grouping: EditableGrouping, groups: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flow, prototypes and outliers (n,) after merging ``groups`` without affinities.

    A member's flow (sum of its affinities to the other members of its group, Sec. 9.4)
    is rescaled from its old group's size to the merged one (mean own affinity times
    ``size - 1``), so members of both groups order by how typical they were of their own
    group; prototype and outlier flags are kept (the top percentile of each part is about
    the top percentile of the union).

    Returns
    -------
    flow : (n,) float64
    prototypes, outliers : (n,) bool
    """
    g = grouping
    labels = np.asarray(g.labels, np.int64)
    sizes = np.bincount(labels, minlength=g.k).astype(np.float64)
    inside = np.isin(labels, [int(x) for x in groups])
    n_new = float(inside.sum())
    flow = np.asarray(g.flow, np.float64).copy()
    old = np.maximum(sizes[labels[inside]] - 1.0, 1.0)
    flow[inside] = flow[inside] / old * max(n_new - 1.0, 1.0)
    return flow, g.prototypes.copy(), g.outliers.copy()


class SplitResult(NamedTuple):
    """A group cut in two by :func:`split_group_iter` (a tuple in this order).

    Attributes
    ----------
    idx : (m,) int64
        Rows of the group.
    halves : (m,) int64
        0/1 per member (1: the new group).
    flow : (m,) float64
    prototypes, outliers : (m,) bool
        Ranking of the two halves on the group's own affinities (Sec. 9.4).
    """

    idx: np.ndarray
    halves: np.ndarray
    flow: np.ndarray
    prototypes: np.ndarray
    outliers: np.ndarray


def split_group_iter(
    collection: Any,
    paths: Sequence[str],
    labels: np.ndarray,
    group: int,
    K: np.ndarray | None = None,
    cancel: Any = None,
) -> Generator[ClusterProgress, None, SplitResult]:
    """Cut group ``group`` in two by a 2-way normalized cut of its own affinities (Shi &
    Malik; thesis Sec. 9.2), without the folder's full affinities.

    With ``K`` (n, n) the group's block is taken from it. Otherwise the group's members are
    described by the cached dense channel (:func:`engine.cluster.category_model_iter`) and
    their sub-kernel is the grouping's affinities (:meth:`engine.cluster.CategoryModel.kernel`:
    the exact normalised vocabulary-guided pyramid match,
    :func:`engine.cluster.binned_pyramid_kernel`, Eqs. 3.12-3.13, mixed with the global
    appearance kernel): the full (m, m) block
    for up to :data:`SPLIT_NYSTROM_MIN` members, else (m, SPLIT_LANDMARKS) Nystrom columns
    of sampled members (Fowlkes et al. 2004). Cost O(m^2) resp. O(m * landmarks), never
    O(n^2).

    Parameters
    ----------
    collection : engine.collection.Collection
    paths : sequence of str
        The grouping's photos (row order of ``labels``).
    labels : (n,) int
        The grouping's labels.
    group : int
        The group to cut.
    K : (n, n) float64, optional
        Affinities of all photos (exact mode).
    cancel : threading.Event, optional
        Stops the job between stages (``InterruptedError``).

    Yields
    ------
    ClusterProgress
        The dense channel's stages, then stage ``"split"`` (0, 1, 2 of 2).

    Returns
    -------
    SplitResult

    Raises
    ------
    ValueError
        The group has fewer than two members, some are no longer indexed, or the cut
        finds no two parts.
    """
    from sklearn.exceptions import ConvergenceWarning

    def check_cancel() -> None:
        if cancel is not None and cancel.is_set():
            raise InterruptedError("cancelled")

    labels = np.asarray(labels, np.int64)
    idx = np.flatnonzero(labels == int(group))
    m = idx.size
    if m < 2:
        raise ValueError(f"group {int(group) + 1} has {m} photo(s); cannot split it")
    kw: dict = {}
    if K is not None:
        C = np.asarray(K, np.float64)[np.ix_(idx, idx)]
    else:
        model = yield from category_model_iter(collection, cancel=cancel)
        row = {str(p): i for i, p in enumerate(model.paths)}
        missing = [paths[i] for i in idx if paths[i] not in row]
        if missing:
            raise ValueError(
                f"{len(missing)} photo(s) of the group are no longer indexed; group again"
            )
        sub_rows = np.array([row[paths[i]] for i in idx], np.int64)
        check_cancel()
        yield ClusterProgress("split", 0, 2, f"Computing the affinities of the group's {m} "
                              "photos…")  # fmt: skip
        if m > SPLIT_NYSTROM_MIN and m > SPLIT_LANDMARKS:
            kw["landmarks"] = choose_landmarks(m, SPLIT_LANDMARKS)
            C = model.kernel(rows=sub_rows, columns=sub_rows[kw["landmarks"]])
        else:
            C = model.kernel(rows=sub_rows, columns=sub_rows)
    check_cancel()
    yield ClusterProgress("split", 1, 2, "Normalized cut of the group…")
    if m == 2:  # nothing to cut: one photo each
        halves = np.array([0, 1], np.int64)
        return SplitResult(idx, halves, np.zeros(2), np.ones(2, bool), np.zeros(2, bool))
    with warnings.catch_warnings():  # a degenerate embedding is reported below instead
        warnings.simplefilter("ignore", ConvergenceWarning)
        sub = discover_categories(C, k=2, **kw)
    check_cancel()
    yield ClusterProgress("split", 2, 2, "Normalized cut of the group…")
    halves = (sub.labels > 0).astype(np.int64)
    if halves.min() == halves.max():
        raise ValueError("the normalized cut found no two parts in this group (its photos "
                         "are all alike)")  # fmt: skip
    return SplitResult(idx, halves, sub.flow, sub.prototypes, sub.outliers)


def move_edit(
    old: EditableGrouping, path: str, group: int, K: np.ndarray | None = None
) -> EditableGrouping:
    """Put photo ``path`` into ``group`` and change nothing else: every other photo keeps
    its group (the person's organisation is theirs; the constraints of
    :func:`move_constraints` keep the move when the folder is grouped again).

    Parameters
    ----------
    old : EditableGrouping
    path : str
        A photo of ``old``.
    group : int
        Its new group, in ``[0, old.k]`` (``old.k``: a new group of its own).
    K : (n, n) float64, optional
        The full affinities: the two groups concerned are ranked again on them (flow,
        prototypes, outliers; Sec. 9.4), the photo moved never an outlier (the person put
        it there). Without them the photo is ranked last in its new group, as neither
        prototype nor outlier.

    Returns
    -------
    EditableGrouping
        The groups keep their numbers (:func:`keep_order_labels`: only a group left empty
        disappears); the names follow (:func:`carry_names`).
    """
    i = old.paths.index(str(path))
    if not 0 <= int(group) <= old.k:
        raise ValueError(f"group must be in [0, {old.k}], got {group}")
    labels = old.labels.copy()
    src = int(labels[i])
    labels[i] = int(group)
    flow, protos, outl = old.flow.copy(), old.prototypes.copy(), old.outliers.copy()
    if K is not None:
        _rank_again(K, labels, {src, int(group)}, (flow, protos, outl))
        outl[i] = False  # (the person put it there: not flagged as not belonging)
    else:
        rest = labels == int(group)
        rest[i] = False
        flow[i] = float(flow[rest].min()) - 1e-6 if rest.any() else 0.0
        protos[i] = outl[i] = False
    g = _kept_in_place(old, labels, (flow, protos, outl), f"moved {path.rsplit('/', 1)[-1]}")
    if int(group) == old.k:  # (a group of its own keeps no name of the group it left)
        g.names.pop(int(g.labels[i]), None)
    return g


def merge_edit(
    old: EditableGrouping, group: int, other: int, K: np.ndarray | None = None
) -> tuple[EditableGrouping, list[tuple[str, str]]]:
    """Join group ``other`` into ``group`` (their union) and change nothing else.

    Parameters
    ----------
    old : EditableGrouping
    group, other : int
        Distinct groups of ``old``.
    K : (n, n) float64, optional
        The full affinities: the merged group's members are ranked again on them (flow,
        prototypes, outliers; Sec. 9.4). Without them their flows are rescaled
        (:func:`merge_ranks`). Every other group keeps its ranking.

    Returns
    -------
    grouping : EditableGrouping
        The merged group takes ``group``'s place and the other groups keep their order
        (:func:`keep_order_labels`: only ``other``'s place disappears); the names follow
        (:func:`carry_names`).
    must : list of (str, str)
        The must-group pair (the two groups' first members) that keeps them together when
        the folder is grouped again.
    """
    group, other = int(group), int(other)
    if group == other or not (0 <= group < old.k and 0 <= other < old.k):
        raise ValueError(f"merge needs two distinct groups of {old.k}, got {group}, {other}")
    a, b = old.members(group)[0], old.members(other)[0]
    must = [(old.paths[a], old.paths[b])]
    labels = np.asarray(old.labels, np.int64).copy()
    labels[labels == other] = group
    flow, protos, outl = merge_ranks(old, [group, other])
    if K is not None:
        _rank_again(K, labels, [group], (flow, protos, outl))
    return _kept_in_place(old, labels, (flow, protos, outl),
                          f"merged {old.name(other)} into {old.name(group)}"), must  # fmt: skip


def _rank_again(
    K: np.ndarray,
    labels: np.ndarray,
    groups: Iterable[int],
    ranks: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """Rank the members of each of ``groups`` again on their own affinities in ``K``
    (n, n) (:func:`engine.cluster.rank_groups`, Sec. 9.4), writing into ``ranks`` = (flow,
    prototypes, outliers) (n,); the other groups keep theirs."""
    K = np.asarray(K, np.float64)
    flow, protos, outl = ranks
    for g in groups:
        idx = np.flatnonzero(labels == g)
        if idx.size:
            flow[idx], protos[idx], outl[idx] = rank_groups(
                K[np.ix_(idx, idx)], np.zeros(idx.size, np.int64)
            )


def _kept_in_place(
    old: EditableGrouping,
    labels: np.ndarray,
    ranks: tuple[np.ndarray, np.ndarray, np.ndarray],
    reason: str,
) -> EditableGrouping:
    """``old`` with the edited ``labels`` (n,) int renumbered in their order
    (:func:`keep_order_labels`), ``ranks`` = (flow, prototypes, outliers) (n,), the names
    following their groups and ``k_reason`` ``"<reason> by hand"``."""
    flow, protos, outl = ranks
    g = EditableGrouping(list(old.paths), keep_order_labels(labels),
                         np.asarray(flow, np.float64), np.asarray(protos, bool),
                         np.asarray(outl, bool), f"{reason} by hand")  # fmt: skip
    g.names = carry_names(old.paths, old.labels, old.names, g.paths, g.labels)
    return g


def split_edit(
    old: EditableGrouping, group: int, split: SplitResult, K: np.ndarray | None = None
) -> tuple[EditableGrouping, list[tuple[str, str]]]:
    """Apply the cut of ``group`` found by :func:`split_group_iter` and change nothing
    else.

    Parameters
    ----------
    old : EditableGrouping
    group : int
    split : SplitResult
    K : (n, n) float64, optional
        The full affinities the split was computed on: the two halves are ranked again on
        them; without them the halves keep the split's own ranking. Every other group
        keeps its ranking.

    Returns
    -------
    grouping : EditableGrouping
        ``group`` keeps its place (and its name) with the half that holds its first
        member; the other half is a new group after all the others, which keep their
        order.
    cannot : list of (str, str)
        The cannot-group pair (the halves' first members) that keeps the halves apart
        when the folder is grouped again (empty if the halves did not survive).
    """
    idx, halves, s_flow, s_protos, s_outl = split
    idx = np.asarray(idx, np.int64)
    halves = np.asarray(halves, np.int64)
    first = old.members(group)[0]
    if first in set(idx[halves == 1].tolist()):  # (the group keeps its first member)
        halves = 1 - halves
    labels = np.asarray(old.labels, np.int64).copy()
    labels[idx[halves == 1]] = old.k
    flow, protos, outl = old.flow.copy(), old.prototypes.copy(), old.outliers.copy()
    if K is None:  # the halves keep the split's own ranking (Sec. 9.4)
        flow[idx], protos[idx], outl[idx] = s_flow, s_protos, s_outl
    else:
        _rank_again(K, labels, [group, old.k], (flow, protos, outl))
    g = _kept_in_place(old, labels, (flow, protos, outl), f"split {old.name(group)}")
    src = set(np.flatnonzero(old.labels == group).tolist())
    parts = sorted({int(g.labels[i]) for i in src})
    tops = [next(i for i in g.members(h) if i in src) for h in parts]
    cannot = [(g.paths[tops[0]], g.paths[tops[1]])] if len(tops) == 2 else []
    return g, cannot


def category_affinities_iter(
    collection: Any, cancel: Any = None
) -> Generator[ClusterProgress, None, np.ndarray | None]:
    """The (n, n) float64 affinities of the grouping pipeline from the cached dense channel
    (for edits after a restart), rows in the channel's order (the collection's).

    Returns None above :data:`engine.cluster.NYSTROM_AUTO_MIN` photos, where the grouping
    keeps no (n, n) matrix either (edits then use :func:`split_group_iter` /
    :func:`merge_ranks`). Yields the dense channel's progress.
    """
    model = yield from category_model_iter(collection, cancel=cancel)
    if len(model.bins) > pipeline.NYSTROM_AUTO_MIN:
        return None
    return model.kernel()
