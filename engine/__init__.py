"""Simile's numeric engine: image loading, local features, set-matching kernels,
hashing, indexing, clustering and similarity learning.

This package never imports Qt or :mod:`app`. Heavy submodules are imported
lazily, so ``import engine`` is cheap.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from typing import TYPE_CHECKING, Any

from engine.core.lazy import attach

__version__ = "0.1.0"

# public name -> submodule that defines it
_LAZY = {
    "ImageLoadError": "io.imageio",
    "load_image": "io.imageio",
    "load_gray": "io.imageio",
    "image_size": "io.imageio",
    "is_image_file": "io.imageio",
    "Features": "features",
    "extract_features": "features",
    "PCA": "features",
    "PyramidMatch": "kernels.pyramid",
    "MatchResult": "kernels.pyramid",
    "optimal_partial_match": "kernels.optimal",
    "VocabularyTree": "kernels.vocabulary",
    "bag_of_words": "kernels.vocabulary",
    "fit_idf": "kernels.vocabulary",
    "discover_categories": "cluster",
    "refine_with_masks": "cluster",
    "Clustering": "cluster",
    "CategoryClassifier": "cluster.classify",
    "WTAHash": "hashing.wta",
    "DensifiedWTAHash": "hashing.wta",
    "code_agreement": "hashing.wta",
    "pack_codes": "hashing.wta",
    "wta_match_candidates": "hashing.wta",
    "RandomHyperplaneHash": "hashing.lsh",
    "BandedIndex": "hashing.lsh",
    "choose_params": "hashing.lsh",
    "L1SetEmbedding": "hashing.lsh",
    "L1SetIndex": "hashing.lsh",
}

__all__ = sorted(_LAZY)

#: Module paths of the flat layout before the subpackages (kept working as aliases of the
#: new modules, for outside scripts): old name -> new home.
MOVED_MODULES: dict[str, str] = {
    "engine._arrays": "engine.core.arrays",
    "engine._blas": "engine.core.blas",
    "engine._gen": "engine.core.progress",
    "engine._validate": "engine.core.validate",
    "engine.imageio": "engine.io.imageio",
    "engine.scan": "engine.io.scan",
    "engine.pyramid": "engine.kernels.pyramid",
    "engine.vocabulary": "engine.kernels.vocabulary",
    "engine.spatial": "engine.kernels.spatial",
    "engine.optimal": "engine.kernels.optimal",
    "engine.correspondences": "engine.kernels.correspondences",
    "engine.wta": "engine.hashing.wta",
    "engine.lsh": "engine.hashing.lsh",
    "engine.store": "engine.index.store",
    "engine.ingest": "engine.index.ingest",
    "engine.search": "engine.index.search",
    "engine.geometry": "engine.index.geometry",
    "engine.classify": "engine.cluster.classify",
    "engine.feedback": "engine.workflows.feedback",
}


class _MovedModuleLoader(importlib.abc.Loader):
    """Imports the new home of a moved module and puts that very module object under the
    old name too (one module, so its state and monkeypatches are shared)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        sys.modules[module.__name__] = importlib.import_module(self.target)


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        new = MOVED_MODULES.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedModuleLoader(new))


if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())


__getattr__, __dir__ = attach(__name__, {k: f"engine.{v}" for k, v in _LAZY.items()})


if TYPE_CHECKING:  # pragma: no cover
    from engine.cluster.classify import CategoryClassifier
    from engine.cluster.discovery import Clustering, discover_categories, refine_with_masks
    from engine.features.keypoints import PCA, Features, extract_features
    from engine.hashing.lsh import (
        BandedIndex,
        L1SetEmbedding,
        L1SetIndex,
        RandomHyperplaneHash,
        choose_params,
    )
    from engine.hashing.wta import (
        DensifiedWTAHash,
        WTAHash,
        code_agreement,
        pack_codes,
        wta_match_candidates,
    )
    from engine.io.imageio import ImageLoadError, image_size, is_image_file, load_gray, load_image
    from engine.kernels.optimal import optimal_partial_match
    from engine.kernels.pyramid import MatchResult, PyramidMatch
    from engine.kernels.vocabulary import VocabularyTree, bag_of_words, fit_idf
