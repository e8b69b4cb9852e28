"""Old home of the grouping code, kept so existing imports keep working.

Everything that lived here moved into the modules of :mod:`engine.cluster`, which re-exports
the public names; import from there (or from the module named in each line below) in new
code. The underscored names are aliases of names that became public, kept until
:mod:`engine.workflows.feedback` imports the public ones from :mod:`engine.cluster`.
"""

from __future__ import annotations

from engine.cluster.affinity import diagonal_dominance, knn_graph, prepare_affinity
from engine.cluster.binned import (
    DENSE_LEVEL_BINS,
    BinnedMatcher,
    BinsMatcher,
    bin_correspondences,
    binned_pyramid_kernel,
    spatial_pyramid_kernel,
)
from engine.cluster.channel import (
    CATEGORY_FEATURES,
    CATEGORY_FEATURES_VERSION,
    DENSE_CHUNK,
    CategoryChannel,
    as_float,
    category_extractor,
    category_features,
    collection_rows,
    hash_of,
    vocab_sample,
)
from engine.cluster.constraints import apply_constraints
from engine.cluster.edits import merge_groups, move_constraints, split_group
from engine.cluster.evaluation import clustering_accuracy
from engine.cluster.model import (
    CATEGORY_VOCAB,
    VOCAB_REFIT_GROWTH,
    CategoryModel,
    category_features_of,
    category_kernel_rows,
    category_mask,
    category_model_iter,
)
from engine.cluster.ncut import (
    DENSE_EIG_MAX,
    choose_landmarks,
    ncut_embedding,
    normalized_cut_value,
)
from engine.cluster.partition import discover_categories, discover_categories_iter
from engine.cluster.pipeline import (
    NYSTROM_AUTO_MIN,
    NYSTROM_LANDMARKS,
    CategoryResult,
    categorize,
    categorize_iter,
    default_k_graph,
    gen_items,
)
from engine.cluster.ranking import rank_groups
from engine.cluster.refine import (
    Matcher,
    masks_from_arrays,
    masks_to_arrays,
    refine_with_masks,
    refine_with_masks_iter,
)
from engine.cluster.results import Clustering, ClusterProgress, Refinement

# Private names imported by engine/workflows/feedback.py and tests/engine/test_feedback.py;
# remove once they import the public names from engine.cluster.
_as_float = as_float
_collection_rows = collection_rows
_vocab_sample = vocab_sample
_category_extractor = category_extractor
_hash_of = hash_of

__all__ = [  # the old module's __all__, then its other public names
    "CATEGORY_FEATURES",
    "CATEGORY_FEATURES_VERSION",
    "CATEGORY_VOCAB",
    "DENSE_CHUNK",
    "DENSE_EIG_MAX",
    "DENSE_LEVEL_BINS",
    "NYSTROM_AUTO_MIN",
    "NYSTROM_LANDMARKS",
    "VOCAB_REFIT_GROWTH",
    "BinnedMatcher",
    "BinsMatcher",
    "CategoryChannel",
    "CategoryModel",
    "CategoryResult",
    "ClusterProgress",
    "Clustering",
    "Matcher",
    "Refinement",
    "apply_constraints",
    "bin_correspondences",
    "binned_pyramid_kernel",
    "categorize",
    "categorize_iter",
    "category_features",
    "category_features_of",
    "category_kernel_rows",
    "category_mask",
    "category_model_iter",
    "choose_landmarks",
    "clustering_accuracy",
    "default_k_graph",
    "diagonal_dominance",
    "discover_categories",
    "discover_categories_iter",
    "gen_items",
    "knn_graph",
    "masks_from_arrays",
    "masks_to_arrays",
    "merge_groups",
    "move_constraints",
    "ncut_embedding",
    "normalized_cut_value",
    "prepare_affinity",
    "rank_groups",
    "refine_with_masks",
    "refine_with_masks_iter",
    "spatial_pyramid_kernel",
    "split_group",
]
