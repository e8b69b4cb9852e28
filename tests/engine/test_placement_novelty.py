"""A photo of a subject none of a person's small groups shows is set aside to review (issue
#22, point 2: two rose photos added to a folder of 8 photos grouped as fountain statues /
coral reef joined the statues).

The kernels are written out: in a group of four the members' own leave-one-out floor is
the least of a handful of affinities, so only the comparison with the other groups'
members catches the new subject."""

from __future__ import annotations

import numpy as np

from engine.cluster.placement import BETWEEN_PERCENTILE, unlike_their_group


def _statues_and_corals() -> tuple[np.ndarray, np.ndarray]:
    """Two groups of four: statues (one of them an odd view, loosely like the others) and
    coral reef; any statue and any coral photo have affinity 0.33."""
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    K = np.full((8, 8), 0.33)
    K[:4, :4] = [
        [1.00, 0.45, 0.40, 0.25],
        [0.45, 1.00, 0.42, 0.24],
        [0.40, 0.42, 1.00, 0.26],
        [0.25, 0.24, 0.26, 1.00],
    ]
    K[4:, 4:] = 0.50
    np.fill_diagonal(K, 1.0)
    return K, y


def test_a_new_subject_no_more_like_a_small_group_than_the_other_group_is_to_review():
    K_tt, y = _statues_and_corals()
    # new photos, all assigned to the statues by the classifier: a rose (about as like the
    # statues as the odd statue is, less than any coral photo is) and a new statue
    rose = [0.30, 0.29, 0.28, 0.27, 0.20, 0.20, 0.20, 0.20]
    statue = [0.42, 0.40, 0.41, 0.26, 0.33, 0.33, 0.33, 0.33]
    coral = [0.33, 0.33, 0.33, 0.33, 0.55, 0.52, 0.53, 0.51]
    K_nt = np.array([rose, statue, coral])
    labels = np.array([0, 0, 1])
    # the statues' own floor (leave-one-out, 5th percentile) is 0.27, near the odd statue's
    # 0.25: the rose (0.29 over its three nearest statues) passes it; every coral photo's
    # measure of the statues is 0.33, and the rose's is lower
    out = unlike_their_group(K_tt, K_nt, y, labels)
    assert out.tolist() == [True, False, False]
    assert 0 < BETWEEN_PERCENTILE < 50


def test_large_tight_groups_keep_their_own_floor():
    """Where the members' own floor is the higher one, the other groups change nothing."""
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 20)
    K = np.where(y[:, None] == y[None, :], 0.7, 0.2) + rng.uniform(-0.02, 0.02, (40, 40))
    K = 0.5 * (K + K.T)
    np.fill_diagonal(K, 1.0)
    K_nt = np.array([np.where(y == 0, 0.66, 0.2), np.where(y == 0, 0.5, 0.2)])
    out = unlike_their_group(K, K_nt, y, np.array([0, 0]))
    assert out.tolist() == [True, True]  # 0.66 and 0.5: below the members' about 0.71
    K_nt[0, y == 0] = 0.73
    assert unlike_their_group(K, K_nt, y, np.array([0, 0])).tolist() == [False, True]


def test_a_singleton_group_and_a_single_group():
    """A group of one photo has no leave-one-out floor; it still has the other groups'.
    With a single group there are no other groups: only its own floor applies."""
    y = np.array([0, 1, 1, 1])
    K = np.array(
        [
            [1.0, 0.30, 0.35, 0.40],
            [0.30, 1.0, 0.6, 0.6],
            [0.35, 0.6, 1.0, 0.6],
            [0.40, 0.6, 0.6, 1.0],
        ]
    )
    K_nt = np.array([[0.20, 0.1, 0.1, 0.1], [0.60, 0.1, 0.1, 0.1]])
    assert unlike_their_group(K, K_nt, y, np.array([0, 0])).tolist() == [True, False]
    one = np.array([0, 0, 0])
    assert unlike_their_group(K[1:, 1:], K_nt[:, 1:], one, np.array([0, 0])).tolist() == [
        True,
        True,
    ]
