"""The persistent, incremental, crash-safe index of a folder: the catalogue and feature
store (:mod:`~engine.index.store`), parallel ingest (:mod:`~engine.index.ingest`), the
inverted search structures (:mod:`~engine.index.search`) and geometric verification of
correspondences (:mod:`~engine.index.geometry`)."""
