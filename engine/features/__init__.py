"""Pixels → local features: SIFT keypoints, dense SIFT, RootSIFT, normalised patches,
and the PCA that projects descriptors.

:mod:`engine.features.keypoints` extracts a :class:`Features` set of one kind
(:func:`extract_features`); :mod:`engine.features.dense` is the one dense-SIFT
implementation (:func:`dense_sift`) that its ``"dense_sift"`` kind, the spatial pyramid's
PHOW and grid channels and the categorisation features are options of.

The second stage of the data flow: ``folder → io → features → kernels / hashing →
index → search / cluster / learn``.
"""

from engine.features.dense import DenseSift, dense_sift
from engine.features.keypoints import KINDS, PCA, Features, extract_features

__all__ = ["KINDS", "PCA", "DenseSift", "Features", "dense_sift", "extract_features"]
