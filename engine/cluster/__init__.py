"""Unsupervised categories of a collection (thesis Ch. 9), and the SVM that places new photos.

Modules, in the order the data flows through them:

- :mod:`~engine.cluster.results` -- progress reports and result records
  (:class:`Clustering`, :class:`Refinement`);
- :mod:`~engine.cluster.affinity` -- kernel to affinities (Sec. 8.1.2), nearest-neighbour
  graph;
- :mod:`~engine.cluster.constraints` -- must-group / cannot-group constraints (Sec. 9.2);
- :mod:`~engine.cluster.ncut` -- normalized cuts, the eigengap, Nystrom (Eq. 9.1);
- :mod:`~engine.cluster.stability` -- stability of cuts under subsampling, which checks the
  eigengap's k against finer partitions;
- :mod:`~engine.cluster.ranking` -- flow, prototypes, outliers (Sec. 9.4);
- :mod:`~engine.cluster.partition` -- :func:`discover_categories`, the above together;
- :mod:`~engine.cluster.binned` -- pyramid match and correspondences on binned feature sets;
- :mod:`~engine.cluster.refine` -- feature masks from within-group correspondences (9.3);
- :mod:`~engine.cluster.edits` -- the person's edits: move, merge, split, names;
- :mod:`~engine.cluster.evaluation` -- accuracy against known classes;
- :mod:`~engine.cluster.appearance` -- a global HOG of every photo and its kernel;
- :mod:`~engine.cluster.semantic` -- what a photo shows, as a network pretrained on
  ImageNet embeds it (run by OpenCV), and its kernel: most of the affinities;
- :mod:`~engine.cluster.fisher` -- Fisher vectors of the dense features, the second view
  the cut's consensus takes (:func:`consensus_cut`);
- :mod:`~engine.cluster.scenes` -- the search's pairs of photos of the same object or
  place, a channel of the cut (:mod:`~engine.cluster.scene_cache`: remembered in the index);
- :mod:`~engine.cluster.channel` -- dense SIFT for grouping (9.5), the appearance
  descriptor and the semantic embedding, cached in the index;
- :mod:`~engine.cluster.model` -- a collection's vocabulary, binned sets and affinities;
- :mod:`~engine.cluster.pipeline` -- :func:`categorize_iter`, the whole-folder pipeline;
- :mod:`~engine.cluster.grouping` -- the grouping of ``simile cluster`` and the app, and its
  storage in the index (one state; the person's edits beside it);
- :mod:`~engine.cluster.classify` -- :class:`CategoryClassifier`, the SVM on the kernel.

:mod:`engine.cluster.discovery` is the old single module, kept as re-exports.
"""

from engine.cluster.affinity import diagonal_dominance, knn_graph, prepare_affinity
from engine.cluster.appearance import (
    APPEARANCE,
    appearance_descriptor,
    appearance_kernel,
    combine_kernels,
)
from engine.cluster.binned import (
    BinnedMatcher,
    BinsMatcher,
    bin_correspondences,
    binned_pyramid_kernel,
    spatial_pyramid_kernel,
)
from engine.cluster.channel import (
    CATEGORY_FEATURES,
    CategoryChannel,
    CategoryFeatures,
    as_float,
    category_extractor,
    category_features,
    collection_rows,
    hash_of,
    vocab_sample,
)
from engine.cluster.constraints import apply_constraints, contradictions
from engine.cluster.edits import (
    EditableGrouping,
    SplitResult,
    carry_names,
    category_affinities_iter,
    compact_labels,
    merge_edit,
    merge_groups,
    merge_ranks,
    move_constraints,
    move_edit,
    pairs_to_rows,
    rebase_grouping,
    split_edit,
    split_group,
    split_group_iter,
)
from engine.cluster.evaluation import clustering_accuracy
from engine.cluster.fisher import FISHER, FisherEncoder, fisher_kernel, fisher_vectors, fisher_view
from engine.cluster.grouping import (
    Grouping,
    SavedEdits,
    group_collection_iter,
    grouping_kernel_rows,
    load_edits,
    load_grouping,
    save_edits,
    save_grouping,
)
from engine.cluster.history import (
    HistoryEntry,
    load_history,
    regrouped_names,
    replace_edits,
    save_history,
)
from engine.cluster.model import (
    CATEGORY_VOCAB,
    CategoryModel,
    category_features_of,
    category_kernel_rows,
    category_mask,
    category_model_iter,
)
from engine.cluster.ncut import choose_landmarks, ncut_embedding, normalized_cut_value
from engine.cluster.partition import (
    AUTO_K_MAX,
    EIGENGAP_K_MAX,
    LANDMARK_GRAPH_MIN,
    consensus_cut,
    discover_categories,
    discover_categories_iter,
    landmark_graph_sizes,
)
from engine.cluster.pipeline import (
    NYSTROM_AUTO_MIN,
    NYSTROM_LANDMARKS,
    CategoryResult,
    categorize,
    categorize_iter,
    default_k_graph,
)
from engine.cluster.placement import REVIEW_NAME, Placement, place_photos_iter, restrict
from engine.cluster.ranking import rank_groups
from engine.cluster.refine import (
    masks_from_arrays,
    masks_to_arrays,
    refine_with_masks,
    refine_with_masks_iter,
)
from engine.cluster.results import Clustering, ClusterProgress, Refinement
from engine.cluster.scenes import join_groups, scene_probabilities_iter, with_scenes
from engine.cluster.semantic import (
    SEMANTIC,
    SEMANTIC_DIM,
    SemanticModelError,
    mix_semantic,
    semantic_embedding,
    semantic_kernel,
)
from engine.cluster.stability import finer_stable_k, subsample_stability

__all__ = [
    "APPEARANCE",
    "AUTO_K_MAX",
    "CATEGORY_FEATURES",
    "CATEGORY_VOCAB",
    "EIGENGAP_K_MAX",
    "FISHER",
    "LANDMARK_GRAPH_MIN",
    "NYSTROM_AUTO_MIN",
    "NYSTROM_LANDMARKS",
    "REVIEW_NAME",
    "SEMANTIC",
    "SEMANTIC_DIM",
    "BinnedMatcher",
    "BinsMatcher",
    "CategoryChannel",
    "CategoryFeatures",
    "CategoryModel",
    "CategoryResult",
    "ClusterProgress",
    "Clustering",
    "EditableGrouping",
    "FisherEncoder",
    "Grouping",
    "HistoryEntry",
    "Placement",
    "Refinement",
    "SavedEdits",
    "SemanticModelError",
    "SplitResult",
    "appearance_descriptor",
    "appearance_kernel",
    "apply_constraints",
    "as_float",
    "bin_correspondences",
    "binned_pyramid_kernel",
    "carry_names",
    "categorize",
    "categorize_iter",
    "category_affinities_iter",
    "category_extractor",
    "category_features",
    "category_features_of",
    "category_kernel_rows",
    "category_mask",
    "category_model_iter",
    "choose_landmarks",
    "clustering_accuracy",
    "collection_rows",
    "combine_kernels",
    "compact_labels",
    "consensus_cut",
    "contradictions",
    "default_k_graph",
    "diagonal_dominance",
    "discover_categories",
    "discover_categories_iter",
    "finer_stable_k",
    "fisher_kernel",
    "fisher_vectors",
    "fisher_view",
    "group_collection_iter",
    "grouping_kernel_rows",
    "hash_of",
    "join_groups",
    "knn_graph",
    "landmark_graph_sizes",
    "load_edits",
    "load_grouping",
    "load_history",
    "masks_from_arrays",
    "masks_to_arrays",
    "merge_edit",
    "merge_groups",
    "merge_ranks",
    "mix_semantic",
    "move_constraints",
    "move_edit",
    "ncut_embedding",
    "normalized_cut_value",
    "pairs_to_rows",
    "place_photos_iter",
    "prepare_affinity",
    "rank_groups",
    "rebase_grouping",
    "refine_with_masks",
    "refine_with_masks_iter",
    "regrouped_names",
    "replace_edits",
    "restrict",
    "save_edits",
    "save_grouping",
    "save_history",
    "scene_probabilities_iter",
    "semantic_embedding",
    "semantic_kernel",
    "spatial_pyramid_kernel",
    "split_edit",
    "split_group",
    "split_group_iter",
    "subsample_stability",
    "vocab_sample",
    "with_scenes",
]
