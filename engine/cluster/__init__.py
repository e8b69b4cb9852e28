"""Unsupervised categories of a collection (thesis ch. 9): affinities, normalized cuts,
mask refinement, the person's edits (:mod:`engine.cluster.discovery`), and the SVM that
places new photos into the groups (:mod:`engine.cluster.classify`)."""

from engine.cluster.discovery import *  # noqa: F403
from engine.cluster.discovery import BinnedMatcher
from engine.cluster.discovery import __all__ as _discovery_all

__all__ = [*_discovery_all, "BinnedMatcher"]
