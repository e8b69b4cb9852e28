"""Simile's numeric engine: image loading, local features, set-matching kernels,
hashing, indexing, clustering and similarity learning.

This package never imports Qt or :mod:`app`. Heavy submodules are imported
lazily, so ``import engine`` is cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> submodule that defines it
_LAZY = {
    "ImageLoadError": "imageio",
    "load_image": "imageio",
    "load_gray": "imageio",
    "image_size": "imageio",
    "is_image_file": "imageio",
    "Features": "features",
    "extract_features": "features",
    "PCA": "features",
    "PyramidMatch": "pyramid",
    "MatchResult": "pyramid",
    "optimal_partial_match": "optimal",
    "VocabularyTree": "vocabulary",
    "bag_of_words": "vocabulary",
    "fit_idf": "vocabulary",
    "discover_categories": "cluster",
    "refine_with_masks": "cluster",
    "Clustering": "cluster",
    "CategoryClassifier": "classify",
    "WTAHash": "wta",
    "DensifiedWTAHash": "wta",
    "code_agreement": "wta",
    "pack_codes": "wta",
    "wta_match_candidates": "wta",
    "RandomHyperplaneHash": "lsh",
    "BandedIndex": "lsh",
    "choose_params": "lsh",
    "L1SetEmbedding": "lsh",
    "L1SetIndex": "lsh",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'engine' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"engine.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:  # pragma: no cover
    from engine.classify import CategoryClassifier
    from engine.cluster import Clustering, discover_categories, refine_with_masks
    from engine.features import PCA, Features, extract_features
    from engine.imageio import ImageLoadError, image_size, is_image_file, load_gray, load_image
    from engine.lsh import (
        BandedIndex,
        L1SetEmbedding,
        L1SetIndex,
        RandomHyperplaneHash,
        choose_params,
    )
    from engine.optimal import optimal_partial_match
    from engine.pyramid import MatchResult, PyramidMatch
    from engine.vocabulary import VocabularyTree, bag_of_words, fit_idf
    from engine.wta import (
        DensifiedWTAHash,
        WTAHash,
        code_agreement,
        pack_codes,
        wta_match_candidates,
    )
