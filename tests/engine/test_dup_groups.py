"""Groups of copies when the search also knows pairs that are not copies
(:func:`engine.workflows.dup_groups.consistent_links`, :func:`conflict_levels`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from engine.workflows.dup_groups import (
    CONFLICT_ONE_SIZE,
    CONFLICT_SHOT,
    CONFLICT_SURE,
    CONFLICT_WEAK,
    conflict_levels,
    consistent_links,
    group_links,
    reduced_copies,
)
from engine.workflows.duplicates import PairEvidence
from engine.workflows.pixel_tiles import PIXEL_MOVED_CAP

PATHS = [Path(f"/p/{c}.jpg") for c in "ABCDE"]
#: Two shots A and C from one spot, a crop B of A and a crop D of C: each crop passes as
#: a copy of both shots and of the other crop.
CROPPED_SHOTS = {
    (0, 1): ("same_photo", 0.46),
    (2, 3): ("same_photo", 0.55),
    (1, 3): ("same_photo", 0.49),
    (0, 3): ("same_photo", 0.39),
    (1, 2): ("same_photo", 0.33),
}


def _got(groups):
    return [(g.tier, sorted(p.stem for p in g.paths)) for g in groups]


def test_a_crop_that_matches_a_second_shot_does_not_bring_it_into_the_group():
    # A, its crop B and its contrast edit C; D another shot of the scene (the size of A),
    # within which the crop lies: B ~ D pass as copies, A ~ D and C ~ D were compared and
    # disagree
    links = {
        (0, 1): ("same_photo", 0.9),
        (0, 2): ("same_photo", 0.8),
        (1, 3): ("same_photo", 0.6),
    }
    conflicts = {(0, 3): CONFLICT_ONE_SIZE, (2, 3): CONFLICT_ONE_SIZE}
    assert _got(group_links(links, PATHS)) == [("same_photo", ["A", "B", "C", "D"])]
    groups = group_links(links, PATHS, conflicts)
    assert _got(groups) == [("same_photo", ["A", "B", "C"])]
    assert groups[0].related == [(PATHS[3], 0.6)]  # (shown beside the group, never acted on)
    kept, left_out = consistent_links(links, conflicts)
    assert left_out == {(1, 3)} and set(kept) == {(0, 1), (0, 2)}
    # conflicts only between pictures of two sizes do not outweigh the link
    weak = {p: CONFLICT_WEAK for p in conflicts}
    assert _got(group_links(links, PATHS, weak)) == [("same_photo", ["A", "B", "C", "D"])]


def test_copies_that_fail_with_each_other_stay_with_their_original():
    # B (heavily recompressed) and C (re-toned), both copies of A of its size, too far
    # apart to pass as copies of each other: as many links as conflicts, none sure
    links = {(0, 1): ("same_photo", 0.9), (0, 2): ("same_photo", 0.8)}
    groups = group_links(links, PATHS, {(1, 2): CONFLICT_ONE_SIZE})
    assert _got(groups) == [("same_photo", ["A", "B", "C"])]


def test_a_reduced_copy_failing_with_a_crop_and_a_warp_joins_its_original():
    # the demo folder's grass: A, its crop B and warp C link with one another; D, a
    # reduced copy, links to A only and fails with B and C (two sizes each time)
    links = {
        (0, 1): ("same_photo", 0.39),
        (0, 2): ("same_photo", 0.43),
        (0, 3): ("same_photo", 0.35),
        (1, 2): ("same_photo", 0.30),
    }
    conflicts = {(1, 3): CONFLICT_WEAK, (2, 3): CONFLICT_WEAK}
    assert _got(group_links(links, PATHS, conflicts)) == [("same_photo", ["A", "B", "C", "D"])]


def test_a_sure_conflict_settles_a_tie():
    # A and its crop B; C another shot the crop matches; A ~ C disagree: one link (B ~ C)
    # against one conflict. Unsure (pixels that disagree), the link stays; sure (capture
    # times that differ), C is left out
    links = {(0, 1): ("same_photo", 0.9), (1, 2): ("same_photo", 0.7)}
    unsure = group_links(links, PATHS, {(0, 2): CONFLICT_ONE_SIZE})
    assert _got(unsure) == [("same_photo", ["A", "B", "C"])]
    groups = group_links(links, PATHS, {(0, 2): CONFLICT_SURE})
    assert _got(groups) == [("same_photo", ["A", "B"])]
    assert groups[0].related == [(PATHS[2], 0.7)]


def test_a_tie_goes_to_the_link_that_agrees_far_more_precisely():
    # the walk folder: A (122600), its 70 % crop B and another shot C from the same spot
    # (122602, the size of A). The crop lies within both and passes as a copy of each, but
    # agrees with A to 0.02 px and with C only as A and C agree (0.15 px): one link
    # against one conflict, a tie the residuals settle
    links = {(0, 1): ("same_photo", 0.46), (1, 2): ("same_photo", 0.38)}
    conflicts = {(0, 2): CONFLICT_SHOT}  # (pixels that show another shot: moved detail)
    residuals = {(0, 1): 0.02, (1, 2): 0.15}
    assert _got(group_links(links, PATHS, conflicts)) == [("same_photo", ["A", "B", "C"])]
    groups = group_links(links, PATHS, conflicts, residuals)
    assert _got(groups) == [("same_photo", ["A", "B"])]
    assert groups[0].related == [(PATHS[2], 0.38)]
    _kept, left_out = consistent_links(links, conflicts, residuals)
    assert left_out == {(1, 2)}
    # alike within the ratio, or within the detector's noise, or one link with no
    # residual (a copy that keeps its frame, an appearance link): the tie stays a link
    for alike in ({(0, 1): 0.08, (1, 2): 0.15}, {(0, 1): 0.01, (1, 2): 0.03}, {(1, 2): 0.15}):
        assert _got(group_links(links, PATHS, conflicts, alike)) == [
            ("same_photo", ["A", "B", "C"])
        ]
    # measured precision settles a conflict of one size whatever its pixels (two shots
    # may fail just short of the rule, 0.949: Holidays' 116401 and 116402); two sizes (a
    # weak conflict) are no tie to settle
    narrow = group_links(links, PATHS, {(0, 2): CONFLICT_ONE_SIZE}, residuals)
    assert _got(narrow) == [("same_photo", ["A", "B"])]
    weak = group_links(links, PATHS, {(0, 2): CONFLICT_WEAK}, residuals)
    assert _got(weak) == [("same_photo", ["A", "B", "C"])]


def test_members_found_not_to_be_copies_are_named_apart():
    # two shots from one spot A and C, each cropped once (B of A, D of C): each crop
    # passes as a copy of both shots and of the other crop, more links than the one
    # conflict A ~ C. The group stands, but it says A and C are not copies
    links = CROPPED_SHOTS
    groups = group_links(links, PATHS, {(0, 2): CONFLICT_ONE_SIZE})
    assert _got(groups) == [("same_photo", ["A", "B", "C", "D"])]
    assert groups[0].apart == [(PATHS[0], PATHS[2])]
    # a weak conflict (two sizes: a crop and a reduced copy of one photo) is no such news
    assert group_links(links, PATHS, {(0, 2): CONFLICT_WEAK})[0].apart == []
    assert group_links(links, PATHS)[0].apart == []


def test_two_shots_each_cropped_once_stay_apart():
    # the walk folder: shots A and C from one spot (122600, 122601), a crop B of A and a
    # crop D of C. Each crop agrees with its own shot to 0.02-0.03 px and with the other
    # shot and crop only as the two shots agree (0.13-0.15 px): the links across are
    # doubtful, taken after the others, and left out by the conflict A ~ C, although
    # they outnumber it and the crops' link (0.49) scores above A ~ B (0.46)
    links = CROPPED_SHOTS
    residuals = {(0, 1): 0.02, (2, 3): 0.03, (1, 3): 0.14, (0, 3): 0.13, (1, 2): 0.15}
    conflicts = {(0, 2): CONFLICT_SHOT}
    groups = group_links(links, PATHS, conflicts, residuals)
    assert _got(groups) == [("same_photo", ["A", "B"]), ("same_photo", ["C", "D"])]
    assert all(g.apart == [] for g in groups)
    _kept, left_out = consistent_links(links, conflicts, residuals)
    assert left_out == {(1, 3), (0, 3), (1, 2)}
    # the links across as precise as the crops' own (a third copy of one photo, not a
    # second shot): the conflict is outnumbered and the group stands
    alike = {**residuals, (1, 3): 0.04, (0, 3): 0.04, (1, 2): 0.04}
    assert _got(group_links(links, PATHS, conflicts, alike)) == [
        ("same_photo", ["A", "B", "C", "D"])
    ]
    # a narrow failure of one size parts them too; a weak conflict (two sizes) does not
    narrow = group_links(links, PATHS, {(0, 2): CONFLICT_ONE_SIZE}, residuals)
    assert _got(narrow) == [("same_photo", ["A", "B"]), ("same_photo", ["C", "D"])]
    assert _got(group_links(links, PATHS, {(0, 2): CONFLICT_WEAK}, residuals)) == [
        ("same_photo", ["A", "B", "C", "D"])
    ]


def test_only_a_reduced_whole_copy_counts_as_exact():
    sizes = {0: (320, 240), 1: (192, 144), 2: (240, 320), 3: (320, 240), 4: None}
    pairs = [(0, 1), (0, 2), (0, 3), (0, 4)]
    assert reduced_copies(pairs, sizes.get) == [(0, 1)]
    # A, a re-toned copy B of one size (its frame kept: no residual), a copy C turned by
    # a few degrees (0.10 px to A); B and C fail with each other (two edits): C stays
    links = {(0, 1): ("same_photo", 0.8), (0, 2): ("same_photo", 0.6)}
    conflicts = {(1, 2): CONFLICT_ONE_SIZE}
    groups = group_links(links, PATHS, conflicts, {(0, 2): 0.10})
    assert _got(groups) == [("same_photo", ["A", "B", "C"])]
    # B a reduced copy of A instead (0: it is A, resized) and C another shot, the size of
    # A, that B passes as a copy of at its size: C's link to B is outmatched
    links = {(0, 1): ("same_photo", 0.54), (1, 2): ("same_photo", 0.46)}
    exact = {(0, 1): 0.0, (1, 2): 0.2}
    groups = group_links(links, PATHS, {(0, 2): CONFLICT_SHOT}, exact)
    assert _got(groups) == [("same_photo", ["A", "B"])]
    # ... but not when A and C fail narrowly, as a copy may (Holidays' 127200 and its
    # copy turned by 2.2 degrees: 0.946, the reduced copy linking them): an exact
    # residual is assumed, not measured, and overrules only pixels that show a shot
    groups = group_links(links, PATHS, {(0, 2): CONFLICT_ONE_SIZE}, exact)
    assert _got(groups) == [("same_photo", ["A", "B", "C"])]


def test_links_are_taken_strongest_first():
    # the weaker of the two links is the one left out, whichever order they come in
    links = {(1, 2): ("same_photo", 0.5), (0, 1): ("same_photo", 0.9)}
    _kept, left_out = consistent_links(links, {(0, 2): CONFLICT_SURE})
    assert left_out == {(1, 2)}
    links = {(1, 2): ("same_photo", 0.95), (0, 1): ("same_photo", 0.9)}
    _kept, left_out = consistent_links(links, {(0, 2): CONFLICT_SURE})
    assert left_out == {(0, 1)}


def test_identical_files_are_never_split():
    links = {(0, 1): ("identical", 1.0), (0, 2): ("identical", 1.0)}
    groups = group_links(links, PATHS, {(1, 2): CONFLICT_SURE})
    assert _got(groups) == [("identical", ["A", "B", "C"])]


def test_conflicts_between_photos_without_copy_links_change_nothing():
    links = {(0, 1): ("same_photo", 0.9), (2, 3): ("similar_shots", 0.4)}
    conflicts = {(2, 3): CONFLICT_SURE, (1, 4): CONFLICT_SURE}
    assert _got(group_links(links, PATHS, conflicts)) == _got(group_links(links, PATHS))


def test_conflict_levels_weigh_sizes_and_capture_times():
    links = {p: ("same_photo", 0.7) for p in [(0, 1), (2, 3)]}
    nan = float("nan")
    framing = PairEvidence(40, 30, 0.5, 0.6, 0.001, 0.2, pixel_agreement=0.0)
    fails = PairEvidence(40, 30, 0.5, 0.6, 0.001, 0.2, pixel_agreement=0.9)
    times = PairEvidence(40, 30, 0.5, 0.6, 0.001, 0.2, pixel_agreement=nan, taken_differ=True)
    sizes = {0: (325, 243), 1: (200, 150), 2: (243, 325), 3: (640, 480), 4: (325, 243)}
    conflicts = {
        (0, 2): framing,  # one size (turned), other framings: not sure (two cuts of a photo)
        (0, 3): framing,  # two sizes: weak
        (1, 3): fails,  # two sizes: weak
        (1, 2): times,  # capture times: sure
        (0, 4): fails,  # row 4 has no copy link: left out
    }
    asked = []

    def size_of(r):
        asked.append(r)
        return sizes[r]

    got = conflict_levels(conflicts, links, size_of)
    assert got == {
        (0, 2): CONFLICT_SHOT,  # (another framing: another shot, or another cut)
        (0, 3): CONFLICT_WEAK,
        (1, 3): CONFLICT_WEAK,
        (1, 2): CONFLICT_SURE,
    }
    assert sorted(asked) == [0, 1, 2, 3]  # (once each)
    assert conflict_levels({(0, 2): fails}, links, lambda r: None) == {(0, 2): CONFLICT_WEAK}
    # of one size: moved detail (at most PIXEL_MOVED_CAP) tells another shot; pixels just
    # short of the rule's do not (a copy may fail so)
    moved = dataclasses.replace(fails, pixel_agreement=PIXEL_MOVED_CAP)
    short = dataclasses.replace(fails, pixel_agreement=0.946)
    both = {**links, (3, 4): links[(0, 1)]}
    got = conflict_levels({(0, 2): moved, (2, 4): short}, both, sizes.get)
    assert got == {(0, 2): CONFLICT_SHOT, (2, 4): CONFLICT_ONE_SIZE}
    # a pair linked as copies after all (its appearance, a RAW and its JPEG) is no conflict
    assert conflict_levels({(0, 1): fails, (2, 3): times}, links, sizes.get) == {}
