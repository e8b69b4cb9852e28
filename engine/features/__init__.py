"""Pixels → local features: SIFT keypoints, dense SIFT, RootSIFT, normalised patches,
and the PCA that projects descriptors.

:mod:`engine.features.keypoints` extracts a :class:`Features` set of one kind
(:func:`extract_features`); :mod:`engine.features.dense` is the one dense-SIFT
implementation (:func:`dense_sift`) that its ``"dense_sift"`` kind, the spatial pyramid's
PHOW and grid channels and the categorisation features are options of.

The second stage of the data flow: ``folder → io → features → kernels / hashing →
index → search / cluster / learn``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.core.lazy import attach

# public name -> submodule that defines it, imported on first use: ``import
# engine.features.keypoints`` (for :class:`Features`) must not pay for OpenCV and the
# image readers that :mod:`engine.features.dense` imports
_LAZY = {
    "DenseSift": "dense",
    "dense_sift": "dense",
    "KINDS": "keypoints",
    "PCA": "keypoints",
    "Features": "keypoints",
    "extract_features": "keypoints",
}

__all__ = ["KINDS", "PCA", "DenseSift", "Features", "dense_sift", "extract_features"]


__getattr__, __dir__ = attach(__name__, {k: f"engine.features.{v}" for k, v in _LAZY.items()})


if TYPE_CHECKING:  # pragma: no cover
    from engine.features.dense import DenseSift, dense_sift
    from engine.features.keypoints import KINDS, PCA, Features, extract_features
