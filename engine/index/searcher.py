"""A collection's search models and data in memory, kept in step with its store.

:class:`Searcher` is what the search methods (:mod:`engine.index.methods`) and the
near-duplicate search (:mod:`engine.workflows.duplicates`) work on: the fitted models
(:class:`~engine.index.fit.SearchModels`), the per-image search data
(:class:`~engine.index.encode.EncodedImages`) and the path of every row, with the
caches built from them (inverted file, banded hash indexes, uniform self-similarities).

:meth:`Searcher.update` brings the catalogue and the stored features up to date with the
folder (:func:`engine.index.ingest.ingest`), then refreshes the search data
(:meth:`Searcher.refresh`):

- the models are fitted on the first index and refitted only when the collection has
  grown to more than ``REFIT_GROWTH`` times the images they were fitted on, or the
  features changed (:mod:`engine.index.fit`); otherwise new images are only encoded with
  the existing models (idf weights stay those of the fit; bins never seen at fit time get
  the largest idf). On a first index the models are fitted while the features are still
  being extracted (:class:`~engine.index.fit.Prefit`): only the collection-wide weights
  (idf), the hashes and the final write remain after the last image.
- An index written with fewer hyperplanes than :func:`~engine.index.candidates.rh_bits`
  asks for is re-hashed from its stored pyramids (no feature is re-read; 30 s at 10,000
  images).

Everything is stored with the store's state API (arrays + JSON, no pickle), and read
from one version, so no reader ever sees new models with old data. The data is kept as
immutable segments (:mod:`engine.index.segments`): an update that only adds or removes
photos encodes the new ones into ONE new segment and commits it without the models
(:meth:`Searcher._update_segments`: its cost is what changed, plus amortised merges); a
fit or a re-hash commits the models with all the data in one segment, in ONE commit
(:meth:`IndexStore.save_states <engine.index.store.IndexStore.save_states>`); the data
names the catalogue rows it was made from (:data:`~engine.index.encode.ROW_KEYS`): a row
whose photo changed, or search data of another catalogue, is never used. An interrupted
run keeps the catalogue of what was finished; opening such an index encodes the images
the search data does not yet hold in memory, so queries always cover everything that is
held. A first index that was interrupted, then completed, fits its models on the files
an uninterrupted one would (:func:`~engine.index.fit.first_files`).

A reader that answers many queries (the app) loads the search data without the
``(nnz,) int64`` bin keys of the pyramids (:class:`~engine.index.search.IntersectionIndex`
scores candidate rows through the persisted compact columns): about 1.05 GB resident at
10,000 images, including the cached hyperplane coordinates of every vocabulary bin
(86 MB); its gathers run in memory of its own, its inverted file and hash caches are
built once. A one-shot reader (``simile query``, :attr:`Searcher.map_data`) maps every
segment instead (:mod:`engine.index.mapped`): it reads the hash codes and bags of words
of every row and the pyramids of the candidates, not the whole data, and answers with
the same scores (0.17 GB resident at 10,000 photos, 0.4 GB at 100,000).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.core.blas import single_threaded_blas
from engine.features.keypoints import Features, extract_features
from engine.index import candidates, fit
from engine.index.encode import (
    ALL_PARTS,
    ENCODE_BATCH,
    INDEX_PARTS,
    ROW_KEYS,
    EncodedImages,
    compatible,
    encode,
    fill_words,
    rehash_bits,
    stacked,
)
from engine.index.ingest import IngestProgress, IngestSummary, ingest
from engine.index.keys import DATA_STATE, MODELS_STATE
from engine.index.manifest import SNAPSHOT_TRIES
from engine.index.mapped import MappedSegments, SegmentedImages, map_segments
from engine.index.rows import RowOfId, RowPaths
from engine.index.segments import (
    block_checks,
    commit_segments,
    holds_uniform,
    live_masks,
    load_segments,
    plan_merges,
    read_data,
    read_layout,
    segment_arrays,
)
from engine.index.store_errors import IndexCorruptError
from engine.index.threads import thread_map
from engine.index.uniform_rows import UniformRows

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse as sp

    from engine.index.store import IndexStore, Snapshot

__all__ = ["FEATURE_KWARGS", "SEARCH_STATES", "RowPaths", "Searcher"]

#: reads of a reader's :meth:`Searcher.refresh` when writers commit between its reads
_READ_ATTEMPTS = 5
FEATURE_KWARGS: dict[str, Any] = {}  # extract_features defaults: RootSIFT, <= 500, side <= 1024
#: The states of the search, committed and read together.
SEARCH_STATES = (MODELS_STATE, DATA_STATE)


class Searcher:
    """The search models and data of one store, in memory, and what is built from them.

    Parameters
    ----------
    store : IndexStore
        The collection's store (its catalogue, features and saved states).
    folder : Path
        The photo folder it indexes (absolute).

    Attributes
    ----------
    store : IndexStore
    folder : Path
    models : SearchModels or None
        The fitted models, once loaded (:meth:`ensure`).
    data : EncodedImages or None
        The search data of every usable image, rows in ascending store id.
    generation : int or None
        The store's generation ``data`` was made from (:meth:`ensure` reloads on change).
    states_token : tuple or None
        The saved version of the models and data (:meth:`Snapshot.token
        <engine.index.manifest.Snapshot.token>`) the ones in memory are: a writer that
        commits another makes :meth:`ensure` load it.
    data_keys : (n,) uint64 or None
        Row keys of ``data`` (:func:`engine.index.catalog.row_keys`), None when unknown
        (an index written before they were saved).
    row_paths : RowPaths
        Path of every row of ``data`` (a sequence of Path).
    row_of_id : mapping of int to int
        Row of every store id in ``data`` (:class:`RowOfId`).
    cache : dict
        Structures built from ``data`` on first use (inverted file, banded indexes; see
        :func:`~engine.index.candidates.candidate_rows`), emptied when ``data`` changes.
    uniform_self : (n,) float64 or None
        Uniform pyramid match of every row with itself, once computed
        (:meth:`uniform_self_similarity`).
    last_scored : int
        Rows scored exactly by the last query (benchmarks).
    lock : threading.RLock
        Held while the models and data are replaced.
    map_data : bool
        Memory-map every segment of the saved search data instead of reading and
        concatenating them (a one-shot reader: :mod:`engine.index.mapped`; ``data`` is
        then a :class:`~engine.index.mapped.SegmentedImages`); False by default.
    """

    def __init__(self, store: IndexStore, folder: Path) -> None:
        self.store = store
        self.folder = folder
        self.models: fit.SearchModels | None = None
        self.data: EncodedImages | None = None
        self.generation: int | None = None
        self._rows_generation: int | None = None  # of the rows the last refresh read
        self.states_token: tuple | None = None
        self.data_keys: np.ndarray | None = None
        self.fit_paths: list[str] | None = None
        self.row_paths: Sequence[Path] = RowPaths([])
        self.row_of_id: Mapping[int, int] = {}
        self.cache: dict[str, Any] = {}
        self.uniform_self: np.ndarray | None = None
        self._models_read: tuple[tuple, fit.SearchModels] | None = None
        self.lock = threading.RLock()
        self.last_scored = 0
        self.map_data = False

    # ------------------------------------------------------------------ indexing
    def update(
        self,
        *,
        jobs: int | None = None,
        cancel: threading.Event | None = None,
        allow_empty: bool = False,
        cluster: str | None = None,
        paths: Sequence[str | os.PathLike] | None = None,
    ) -> Generator[IngestProgress, None, IngestSummary]:
        """Bring the index up to date with the folder (or with ``paths`` of it): a
        generator of progress, returning the summary (see
        :meth:`engine.collection.Collection.update`)."""
        # a first index fits its models while the features are still being extracted; one
        # completed after an interruption (or whose models were lost) on the same files
        store = self.store
        prefit = first = None
        if not store.snapshot().has(MODELS_STATE):  # (a damaged manifest: raised here)
            if store.count(None):
                first = fit.first_files(store, self.folder)
            prefit = fit.Prefit(store, first)
        self.fit_paths = first
        try:
            summary = yield from ingest(
                store,
                self.folder,
                jobs=jobs,
                cancel=cancel,
                feature_kwargs=FEATURE_KWARGS,
                spread=fit.PREFIT_SPREAD if prefit is not None and first is None else 0,
                on_plan=prefit.plan if prefit is not None else None,
                allow_empty=allow_empty,
                cluster=cluster,
                paths=paths,
            )
        except BaseException:
            if prefit is not None:
                prefit.cancel()
            raise
        if cancel is not None and cancel.is_set():
            if prefit is not None:
                prefit.cancel()
            return summary
        yield IngestProgress(0, 0, None, "finalizing", "fitting models and hashing")
        if holds_uniform(store.snapshot()):
            # (an index of an earlier version: stored uniform pyramids dropped, int64
            # indices rewritten int32, the descriptors' words added: engine.index.segments)
            yield IngestProgress(
                0, 0, None, "finalizing", "updating the search data to this version's layout"
            )
        t0 = time.perf_counter()
        prepared = prefit.finish() if prefit is not None else None
        try:
            self.refresh(save=True, cancel=cancel, prepared=prepared)
        finally:
            self.fit_paths = None
        seconds = summary.seconds + (time.perf_counter() - t0)
        return dataclasses.replace(
            summary,
            seconds=seconds,
            cancelled=bool(cancel is not None and cancel.is_set()),
        )

    def refresh(
        self,
        *,
        save: bool,
        cancel: threading.Event | None = None,
        prepared: SimpleNamespace | None = None,
    ) -> None:
        """Make the in-memory models and data cover exactly the store's usable images.

        Parameters
        ----------
        save : bool
            Save what changed (a writer's update); readers never write.
        cancel : threading.Event, optional
            Once set (with ``save``), no further batch is encoded: what is encoded so
            far is kept.
        prepared : SimpleNamespace, optional
            Models and encoded batches from :meth:`engine.index.fit.Prefit.finish`, used
            when the models are to be fitted.
        """
        with self.lock:
            for attempt in range(_READ_ATTEMPTS):
                try:
                    return self._refresh(save, cancel, prepared)
                except KeyError:
                    # a reader met a writer's commit between its reads (photos removed
                    # after it read the rows): read both again
                    if save or attempt + 1 == _READ_ATTEMPTS:
                        raise
                    if self.store.generation == self._rows_generation:
                        raise

    def _refresh(
        self, save: bool, cancel: threading.Event | None, prepared: SimpleNamespace | None
    ) -> None:
        """One pass of :meth:`refresh` (the lock held)."""
        store = self.store
        snap = store.snapshot()  # the states first: a writer commits rows, then states
        token = snap.token(SEARCH_STATES)
        maps = None
        if self.map_data and not save and (self.models is None or token != self.states_token):
            # a one-shot reader maps the data first: the check of its files then runs
            # while the catalogue is read
            maps = self._map(snap)
        rows = store.usable_rows()  # ids, keys and paths of one catalogue state
        self._rows_generation = rows.generation
        ids, keys = rows.ids, rows.keys
        models, data, data_keys = self.models, self.data, self.data_keys
        if ids.size == 0:
            self._install(None, None, rows, None, None, token)
            return
        if save and not store.readonly and self._update_segments(snap, rows, cancel):
            return  # photos added or removed: a new segment, or none, was committed
        if models is None or token != self.states_token:
            # nothing in memory, or a writer committed another version meanwhile
            models, data, data_keys, token = self._load_saved(snap, save, rows, maps)
        changed = False
        if self._needs_refit(models, ids) and (save or not self._grown_only(models, ids)):
            # (a reader answers with the models it finds while a collection that grew
            # waits for a writer's refit: they encode every photo it holds)
            refitted = self._refit(ids, prepared, cancel)
            if refitted is None:  # cancelled: the version committed before stays
                self._forget()
                return
            models, data = refitted
            data_keys = keys[np.searchsorted(ids, data.ids)]
            changed = True
        elif (
            data is not None
            and save
            and not store.readonly
            and models.rh.n_bits < candidates.rh_bits(ids.size)
        ):
            # more hyperplanes for a grown collection (or an index written before
            # rh_bits): re-hash the stored pyramids, no feature read; by update() only
            rehash_bits(models, data, candidates.rh_bits(ids.size))
            changed = True
        if data is not None and save and not store.readonly and models.he is None:
            # (models from before the Hamming embedding: fitted on a sample, no re-encoding)
            changed = fit.add_hamming(store, ids, models) or changed
        data, covered = self._cover(models, data, data_keys, ids, keys, save, cancel)
        data_keys = keys[np.searchsorted(ids, data.ids)]
        changed = changed or covered
        if save and changed and not store.readonly:
            data_state = data.to_state()
            data_state[ROW_KEYS] = data_keys
            data_state.update(block_checks(data_state))  # (readers check what they read)
            store.save_states({MODELS_STATE: models.to_state(), DATA_STATE: data_state})
            token = store.snapshot().token(SEARCH_STATES)
        self._install(models, data, rows, data.ids, data_keys, token)

    def _map(self, snap: Snapshot) -> tuple[tuple, MappedSegments] | None:
        """The search data of version ``snap`` mapped (:func:`engine.index.mapped.
        map_segments`) with the token of its files, or None (no data, a file gone or
        compressed: :meth:`_load_saved` reads it then; a damaged one raises there)."""
        if DATA_STATE not in snap.entries or not snap.has(MODELS_STATE):
            return None
        try:
            maps = map_segments(snap)
        except (FileNotFoundError, KeyError, ValueError, IndexCorruptError):
            return None
        return (snap.token([DATA_STATE]), maps) if maps is not None else None

    def _load_saved(
        self,
        snap: Snapshot,
        save: bool,
        rows: Any,
        maps: tuple[tuple, MappedSegments] | None = None,
    ) -> tuple[fit.SearchModels | None, EncodedImages | None, np.ndarray | None, tuple]:
        """The saved models and data of version ``snap`` (or of a newer one, when a writer
        committed meanwhile), the data's row keys and the version's token; ``None`` for
        the first three when there are none, or they cannot be used (another version's
        format: they are refitted). ``maps``: the data of a version already mapped
        (:meth:`_map`), used when it is the version read.

        Raises
        ------
        IndexCorruptError
            They are damaged; or, for a reader (``save`` false), they were made from
            another catalogue, or the data does not match the models (a writer refits, or
            re-encodes, then).
        """
        store = self.store
        if not snap.has(MODELS_STATE):
            if not save and set(SEARCH_STATES) & set(snap.hidden):
                raise IndexCorruptError(
                    f"the search data of the index {store.index_dir} was made from another "
                    "catalogue (states/MANIFEST.json names another catalog.id)",
                    path=store.states_dir / "MANIFEST.json",
                )
            return None, None, None, snap.token(SEARCH_STATES)
        read, self._models_read = self._models_read, None
        for attempt in range(SNAPSHOT_TRIES):
            if attempt == 0 and read is not None and read[0] == snap.token([MODELS_STATE]):
                states = None  # (read by _update_segments from this very version)
            else:
                try:
                    snap, states = store.load_version([MODELS_STATE])
                except KeyError:  # deleted by a commit meanwhile
                    return None, None, None, store.snapshot().token(SEARCH_STATES)
            token = snap.token(SEARCH_STATES)
            try:
                if states is None:
                    models = read[1]
                else:
                    models = fit.SearchModels.from_state(states[MODELS_STATE])
                data, data_keys = None, None
                if save and self._needs_refit(models, rows.ids):
                    pass  # every photo is encoded again: the saved data is not read
                elif DATA_STATE in snap.entries:
                    if maps is not None and maps[0] == snap.token([DATA_STATE]):
                        data, data_keys = maps[1].data(rows.ids, rows.keys)
                    else:
                        data, data_keys = read_data(
                            snap, rows.ids, rows.keys, mapped=self.map_data
                        )
                    if isinstance(data, SegmentedImages):  # (files checked on first use)
                        store.close_with(data.checks)
                elif snap.has(DATA_STATE):  # damaged (a legacy JSON)
                    store.load_version([DATA_STATE])  # raises IndexCorruptError
                break
            except FileNotFoundError as exc:
                # a writer committed, and collected the files of the version read
                if attempt + 1 == SNAPSHOT_TRIES:
                    raise IndexCorruptError(
                        f"a saved state of the index {store.index_dir} is damaged "
                        f"(states/{Path(exc.filename or '?').name}: missing)",
                        path=Path(exc.filename or store.states_dir),
                    ) from exc
            except (KeyError, ValueError):
                return None, None, None, token
        if data is not None:
            if not compatible(models, data):
                if not save:
                    raise IndexCorruptError(
                        f"the search data of the index {store.index_dir} does not match its "
                        "models (states/search.data: left by an interrupted update)",
                        path=store.states_dir,
                    )
                data, data_keys = None, None  # encoded again with the models
        return models, data, data_keys, token

    def _update_segments(self, snap: Snapshot, rows: Any, cancel: threading.Event | None) -> bool:
        """A writer's update that costs what changed (:mod:`engine.index.segments`): the
        photos not yet in the search data are encoded with the saved models into ONE new
        segment, segments due a merge are merged, and the result is committed without
        the models; nothing is committed when nothing changed. Returns False, doing
        nothing, when the data must be made whole instead: no saved models or data, data
        of another format, or models due a refit, more hash bits or a Hamming embedding."""
        store, ids = self.store, rows.ids
        if not (snap.has(MODELS_STATE) and DATA_STATE in snap.entries):
            return False
        models = self.models
        if (
            models is None
            or self.states_token is None
            or (self.states_token[0] != snap.token([MODELS_STATE])[0])
        ):
            try:
                snap, states = store.load_version([MODELS_STATE])
                models = fit.SearchModels.from_state(states[MODELS_STATE])
            except (KeyError, ValueError):
                return False
            # (a refit or re-encoding, below, needs them again: not read twice)
            self._models_read = (snap.token([MODELS_STATE]), models)
        due = self._needs_refit(models, ids) or models.rh.n_bits < candidates.rh_bits(ids.size)
        due = due or models.he is None  # (then fitted by _refresh: models from before it)
        if due and not self._grown_only(models, ids):
            return False  # other features: every photo is encoded again by the refit
        try:
            handles = snap.open([DATA_STATE])[DATA_STATE]  # (each file opened once)
        except FileNotFoundError:
            return False  # a commit meanwhile (another writer cannot hold the lock)
        try:
            done = self._update_layout(snap, rows, cancel, models, handles)
        finally:
            for fh in handles.values():
                fh.close()
        if done:
            self._models_read = None
        if done and due:
            # A collection grown past REFIT_GROWTH (or due more hash bits): its new photos
            # were committed first, encoded with the old models, so they are searchable
            # and readers keep answering while the refit (or re-hash) that follows in
            # _refresh builds the new version, committed in one swap; if it is cancelled
            # or killed, the next update does it.
            return bool(cancel is not None and cancel.is_set())
        return done

    def _update_layout(
        self,
        snap: Snapshot,
        rows: Any,
        cancel: threading.Event | None,
        models: fit.SearchModels,
        handles: dict[str, Any],
    ) -> bool:
        """:meth:`_update_segments` once the models fit (``handles``: the data's files,
        open; segments rewritten get the words they lack, :func:`fill_words`)."""
        store, ids, keys = self.store, rows.ids, rows.keys
        layout = read_layout(snap, handles)
        if layout is None or not layout.fits(models):
            return False
        # uniform pyramids stored by an earlier version: their files alone leave the
        # segments, the segments holding them among other arrays are rewritten
        layout, mixed = layout.without_uniform()
        masks = live_masks(layout.ids, layout.keys, ids, keys)
        held = np.concatenate([i[m] for i, m in zip(layout.ids, masks, strict=True)])
        new_ids = ids[~np.isin(ids, held)]
        batches = [new_ids[s : s + ENCODE_BATCH] for s in range(0, new_ids.size, ENCODE_BATCH)]

        def encode_new(batch: np.ndarray) -> EncodedImages | None:
            if cancel is not None and cancel.is_set():
                return None  # cancelled: what is encoded so far is kept
            return encode(models, batch, stacked(store, batch), parts=INDEX_PARTS)

        encoded = [e for e in thread_map(encode_new, batches) if e is not None]
        new = EncodedImages.concat(encoded) if encoded else None
        live = [int(m.sum()) for m in masks]
        total = [int(m.size) for m in masks]
        if new is not None:
            live.append(len(new.ids))
            total.append(len(new.ids))
        merge = sorted(set(plan_merges(live, total)) | {i for i in mixed if live[i] > 0})
        n_old = len(layout.files)
        keep = [i for i in range(n_old) if live[i] > 0 and i not in merge]
        dropped = any(lv == 0 for lv in live[:n_old]) or bool(layout.uniform)
        current = self.data is not None and self.states_token == snap.token(SEARCH_STATES)
        if new is None and not merge and not dropped:
            self._install_after_segments(current, models, rows, None)
            return True
        parts = [
            (fill_words(models, store, d.subset(np.flatnonzero(masks[i]))), k[masks[i]])
            for i, (d, k) in zip(
                [i for i in merge if i < n_old],
                load_segments(snap, layout, [i for i in merge if i < n_old], handles),
                strict=True,
            )
        ]
        for fh in handles.values():  # (read: closed before the commit collects files)
            fh.close()
        new_files = []
        if new is not None:
            new_keys = keys[np.searchsorted(ids, new.ids)]
            if n_old in merge:
                parts.append((new, new_keys))
            else:
                new_files.append(store.write_state_part(DATA_STATE, segment_arrays(new, new_keys)))
        if parts:
            merged = EncodedImages.concat([d for d, _ in parts])
            merged_keys = np.concatenate([k for _, k in parts])
            order = np.argsort(merged.ids, kind="stable")
            merged, merged_keys = merged.subset(order), merged_keys[order]
            arrays = segment_arrays(merged, merged_keys)
            new_files.insert(0, store.write_state_part(DATA_STATE, arrays))
        commit_segments(store, layout, keep, new_files)
        self._install_after_segments(current, models, rows, new)
        return True

    def _install_after_segments(
        self, current: bool, models: fit.SearchModels, rows: Any, new: EncodedImages | None
    ) -> None:
        """After :meth:`_update_segments`: the data in memory, when it was the version
        the update started from (``current``), gets the same change; otherwise it is
        loaded when next needed (:meth:`ensure`)."""
        data, data_keys = self.data, self.data_keys
        ids, keys = rows.ids, rows.keys
        if current and data is not None and data_keys is not None:
            held = np.isin(data.ids, ids)
            at = np.searchsorted(ids, data.ids[held])
            held[held] = keys[at] == data_keys[held]
            parts = [data if held.all() else data.subset(np.flatnonzero(held))]
            if new is not None:
                parts.append(new)
            data = EncodedImages.concat(parts) if len(parts) > 1 else parts[0]
            order = np.argsort(data.ids, kind="stable")
            if not np.array_equal(order, np.arange(order.size)):
                data = data.subset(order)
            if data.ids.size == ids.size:  # (else a cancelled update: read it all later)
                token = self.store.snapshot().token(SEARCH_STATES)
                data_keys = keys[np.searchsorted(ids, data.ids)]
                self._install(models, data, rows, data.ids, data_keys, token)
                return
        self._forget()

    def _needs_refit(self, models: fit.SearchModels | None, ids: np.ndarray) -> bool:
        """No models, a collection grown past ``REFIT_GROWTH``, or other features."""
        refit = models is None or ids.size > fit.REFIT_GROWTH * max(models.n_fit, 1)
        if not refit:
            # check feature dimension of one image
            feats = self.store.get_features(int(ids[0]))
            refit = feats.descriptors.shape[1] != models.dim and len(feats) > 0
        return refit

    def _grown_only(self, models: fit.SearchModels | None, ids: np.ndarray) -> bool:
        """Whether a refit (or re-hash) is due only because the collection grew: the
        models can still encode its photos (same features)."""
        if models is None:
            return False
        feats = self.store.get_features(int(ids[0]))
        return feats.descriptors.shape[1] == models.dim or len(feats) == 0

    def _forget(self) -> None:
        """Drop the models and data in memory: read again when next needed."""
        self.models = self.data = self.data_keys = self.states_token = None
        self.generation = None
        self.cache, self.uniform_self = {}, None

    def _refit(
        self,
        ids: np.ndarray,
        prepared: SimpleNamespace | None,
        cancel: threading.Event | None = None,
    ) -> tuple[fit.SearchModels, EncodedImages] | None:
        """:func:`engine.index.fit.refit` of this store's images ``ids``."""
        return fit.refit(self.store, ids, prepared, fit_paths=self.fit_paths, cancel=cancel)

    def _cover(
        self,
        models: fit.SearchModels,
        data: EncodedImages | None,
        data_keys: np.ndarray | None,
        ids: np.ndarray,
        keys: np.ndarray,
        save: bool,
        cancel: threading.Event | None,
    ) -> tuple[EncodedImages, bool]:
        """``data`` made to hold exactly the rows of ``ids`` (ascending, with row ``keys``),
        in ascending id order: rows of images gone, or whose photo or features changed
        since (``data_keys``: None, not known), dropped; new ones encoded; and whether
        anything changed."""
        changed = False
        if isinstance(data, SegmentedImages):
            return self._cover_mapped(models, data, data_keys, ids, keys)
        if data is not None:
            held = np.isin(data.ids, ids)
            if data_keys is not None:
                at = np.searchsorted(ids, data.ids[held])
                held[held] = keys[at] == data_keys[held]
            keep = np.flatnonzero(held)
            if keep.size != data.ids.size:
                data = data.subset(keep)
                changed = True
        have = data.ids if data is not None else np.zeros(0, np.int64)
        new_ids = ids[~np.isin(ids, have)]
        parts = [data] if data is not None and len(data.ids) else []
        new_batches = [new_ids[s : s + ENCODE_BATCH] for s in range(0, new_ids.size, ENCODE_BATCH)]

        def encode_new(batch: np.ndarray) -> EncodedImages | None:
            if cancel is not None and cancel.is_set() and save:
                return None  # cancelled: what is encoded so far is kept
            return encode(models, batch, stacked(self.store, batch), parts=INDEX_PARTS)

        encoded = [e for e in thread_map(encode_new, new_batches) if e is not None]
        parts.extend(encoded)
        changed = changed or bool(encoded)
        data = (
            EncodedImages.concat(parts)
            if parts
            else encode(models, new_ids[:0], [], parts=INDEX_PARTS)
        )
        # rows in ascending id order (= store order)
        order = np.argsort(data.ids, kind="stable")
        if not np.array_equal(order, np.arange(order.size)):
            data = data.subset(order)
        return data, changed

    def _cover_mapped(
        self,
        models: fit.SearchModels,
        data: SegmentedImages,
        data_keys: np.ndarray | None,
        ids: np.ndarray,
        keys: np.ndarray,
    ) -> tuple[SegmentedImages, bool]:
        """:meth:`_cover` of a reader's mapped data: rows no longer usable are left out
        and images not yet encoded are encoded into memory, nothing else is copied."""
        held = np.isin(data.ids, ids)
        if data_keys is not None:
            at = np.searchsorted(ids, data.ids[held])
            held[held] = keys[at] == data_keys[held]
        changed = not held.all()
        if changed:
            data = data.subset(np.flatnonzero(held))
        new_ids = ids[~np.isin(ids, data.ids)]
        batches = [new_ids[s : s + ENCODE_BATCH] for s in range(0, new_ids.size, ENCODE_BATCH)]
        for new in thread_map(
            lambda b: encode(models, b, stacked(self.store, b), parts=INDEX_PARTS), batches
        ):
            data = data.with_rows(new)
            changed = True
        return data, changed

    def _install(
        self,
        models: fit.SearchModels | None,
        data: EncodedImages | None,
        rows: Any,
        ids: np.ndarray | None,
        data_keys: np.ndarray | None,
        token: tuple | None,
    ) -> None:
        """Install what :meth:`refresh` made: ``rows`` (:meth:`IndexStore.usable_rows
        <engine.index.store.IndexStore.usable_rows>`) name the paths of the data's ``ids``
        (a subset) from the same catalogue state. The data's uniform pyramids are made
        from the stored features when read (:class:`~engine.index.uniform_rows.
        UniformRows`)."""
        if models is not None and data is not None:
            held = data.uniform
            if not (
                isinstance(held, UniformRows) and held.models is models and held.ids is data.ids
            ):
                data.uniform = UniformRows(self.store, models, data.ids)
        self.models, self.data, self.data_keys = models, data, data_keys
        self.states_token = token
        self.generation = rows.generation
        ids = rows.ids if ids is None else ids
        if np.array_equal(ids, rows.ids):  # (every usable image: the catalogue's order)
            self.row_paths = RowPaths(list(rows.paths))
        else:
            path_of = dict(zip(rows.ids.tolist(), rows.paths, strict=True))
            self.row_paths = RowPaths([path_of[int(i)] for i in ids])
        self.row_of_id = RowOfId(ids)
        self.cache = {}
        self.uniform_self = None

    def ensure(self) -> tuple[fit.SearchModels, EncodedImages]:
        """The models and data, (re)loaded when the store changed since.

        Raises
        ------
        LookupError
            The index holds no usable image.
        """
        with self.lock:
            stale = self.data is None or self.generation != self.store.generation
            if stale or self.states_token != self.store.snapshot().token(SEARCH_STATES):
                self.refresh(save=False)
            if self.models is None or self.data is None:
                raise LookupError(
                    f"the index of {self.folder} holds no usable image; run 'simile index'"
                )
            return self.models, self.data

    def paths(self) -> list[Path]:
        """Usable images in row order (the store's order when the data is not current)."""
        with self.lock:
            if self.generation != self.store.generation:
                return [Path(p) for p in self.store.paths("ok")]
            return list(self.row_paths)

    # ------------------------------------------------------------------ queries
    def query_features(self, image: Any) -> tuple[Features, int | None]:
        """Features of a query (path, image array or Features) and its row in the
        collection (None if outside)."""
        if isinstance(image, Features):
            return image, None
        if isinstance(image, np.ndarray):
            return extract_features(image, **FEATURE_KWARGS), None
        path = Path(os.path.abspath(os.fspath(image)))
        rec = self.store.record(path)
        if rec is not None and rec.status == "ok":
            return self.store.get_features(rec.id), self.row_of_id.get(rec.id)
        return extract_features(path, **FEATURE_KWARGS), None

    def query_row(self, image: Any) -> int | None:
        """The row of a query given as the path of a usable photo of the collection (None
        for any other query)."""
        if isinstance(image, (Features, np.ndarray)):
            return None
        rec = self.store.record(Path(os.path.abspath(os.fspath(image))))
        return self.row_of_id.get(rec.id) if rec is not None and rec.status == "ok" else None

    def query_encoding(
        self, models: fit.SearchModels, feats: Features, parts: frozenset[str] = ALL_PARTS
    ) -> EncodedImages:
        """A query's search data (one row, id -1): its vocabulary pyramid and the
        optional ``parts`` (``"uniform"``, ``"wta"``, ``"rh"``)."""
        d = feats.descriptors
        if len(d) and d.shape[1] != models.dim:
            raise ValueError(
                f"query features have {d.shape[1]} dimensions, the index {models.dim}"
            )
        d = d.reshape(-1, models.dim)
        return encode(models, np.array([-1]), [d], parts=parts)

    def candidates(self, kind: str, q: Any, data: EncodedImages, n_want: int) -> np.ndarray:
        """:func:`~engine.index.candidates.candidate_rows` with this searcher's cache."""
        return candidates.candidate_rows(kind, q, data, n_want, self.cache)

    def uniform_self_similarity(self, data: EncodedImages) -> np.ndarray:
        """(n,) float64 uniform pyramid match of every row with itself (computed once; for
        mapped data, :class:`~engine.index.segmented.RowSums`: computed for the rows asked)."""
        if self.uniform_self is None:
            self.uniform_self = data.uniform.self_similarity()
        return self.uniform_self

    # ------------------------------------------------------------------ matrices
    def kernel_matrix(self, method: str = "vocabulary") -> np.ndarray:
        """(n, n) float64 normalised affinities of all images (see
        :meth:`engine.collection.Collection.kernel_matrix`)."""
        if method not in ("vocabulary", "uniform"):
            raise ValueError(f"method must be 'vocabulary' or 'uniform', got {method!r}")
        _, data = self.ensure()
        ix = data.vocab if method == "vocabulary" else data.uniform
        with single_threaded_blas():
            K = ix.pairwise()
        d = np.diag(K).copy()
        if method == "uniform":
            den = np.sqrt(np.outer(d, d))
            K = np.where(den > 0, K / np.where(den > 0, den, 1.0), 0.0)
        np.fill_diagonal(K, (d > 0).astype(np.float64))
        return K

    def bow_vector(self, image: Any) -> sp.csr_matrix:
        """(1, n_words) float32 tf-idf bag of words of any image (see
        :meth:`engine.collection.Collection.bow_vector`)."""
        models, _ = self.ensure()
        feats, _row = self.query_features(image)
        return self.query_encoding(models, feats).bow
