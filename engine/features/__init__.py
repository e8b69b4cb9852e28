"""Pixels → local features: SIFT keypoints, dense SIFT, RootSIFT, normalised patches,
and the PCA that projects descriptors (:mod:`engine.features.keypoints`).

The second stage of the data flow: ``folder → io → features → kernels / hashing →
index → search / cluster / learn``.
"""

from engine.features.keypoints import KINDS, PCA, Features, extract_features

__all__ = ["KINDS", "PCA", "Features", "extract_features"]
