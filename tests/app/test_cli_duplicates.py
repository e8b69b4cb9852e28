"""``simile duplicates`` shows the copy to keep, chosen by the engine's rule (the app's)."""

import json
import shutil

import pytest

from app.cli import main


@pytest.fixture(scope="module")
def folder(tmp_path_factory, demo_folder):
    cv2 = pytest.importorskip("cv2")
    root = tmp_path_factory.mktemp("dups")
    photos = root / "photos"
    photos.mkdir()
    for name in ("brick.jpg", "astronaut.jpg"):
        shutil.copy(demo_folder / name, photos / name)
    shutil.copy(demo_folder / "brick.jpg", photos / "brick_again.jpg")
    img = cv2.imread(str(demo_folder / "brick.jpg"))
    half = cv2.resize(img, (img.shape[1] // 2, img.shape[0] // 2), interpolation=cv2.INTER_AREA)
    cv2.imwrite(str(photos / "brick_small.jpg"), half)
    assert main(["index", str(photos), "--index", str(root / "idx"), "--json"]) == 0
    return photos, root / "idx"


def test_duplicates_name_the_copy_to_keep(folder, capsys):
    from engine.workflows.duplicates import suggest_keeper

    photos, index = folder
    capsys.readouterr()
    assert main(["duplicates", str(photos), "--index", str(index), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    group = next(g for g in res["groups"] if any("brick_again" in p for p in g["paths"]))
    assert group["keep"] in group["paths"]
    assert group["keep"].rsplit("/", 1)[-1] in {"brick.jpg", "brick_again.jpg"}  # full size
    want = suggest_keeper(group["paths"])
    assert (group["keep"], group["keep_reason"]) == (want.path, want.reason)
    assert main(["duplicates", str(photos), "--index", str(index)]) == 0
    out = capsys.readouterr().out
    assert f"keep {group['keep']}: {group['keep_reason']}" in out
    score = group["scores"][group["paths"].index(group["keep"])]
    assert f"  * {score:6.3f}  {group['keep']}\n" in out  # marked in its group


@pytest.fixture(scope="module")
def tiered(tmp_path_factory, demo_folder):
    """holidays/ with a photo, its byte-identical copy in exports/, a half-size JPEG
    re-export and a 90-degree turn of another photo, and an unrelated one."""
    cv2 = pytest.importorskip("cv2")
    root = tmp_path_factory.mktemp("tiers")
    top = root / "pics"
    (top / "holidays").mkdir(parents=True)
    (top / "exports").mkdir()
    shutil.copy2(demo_folder / "coffee.jpg", top / "holidays" / "100000.jpg")
    shutil.copy2(demo_folder / "coffee.jpg", top / "exports" / "100000 copy.jpg")
    shutil.copy2(demo_folder / "brick.jpg", top / "holidays" / "brick.jpg")
    shutil.copy2(demo_folder / "astronaut.jpg", top / "holidays" / "astronaut.jpg")
    img = cv2.imread(str(demo_folder / "brick.jpg"))
    half = cv2.resize(img, (img.shape[1] // 2, img.shape[0] // 2), interpolation=cv2.INTER_AREA)
    cv2.imwrite(str(top / "exports" / "brick_web.jpg"), half, [cv2.IMWRITE_JPEG_QUALITY, 60])
    cv2.imwrite(
        str(top / "exports" / "brick_turned.png"), cv2.rotate(img, cv2.ROTATE_90_CLOCKWISE)
    )
    assert main(["index", str(top), "--index", str(root / "idx"), "--json"]) == 0
    return top, root / "idx"


def _run_json(capsys, *argv):
    capsys.readouterr()
    assert main(["duplicates", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_json_groups_carry_tier_keep_and_reason(tiered, capsys):
    top, index = tiered
    res = _run_json(capsys, str(top), "--index", str(index))
    by_tier = {g["tier"]: g for g in res["groups"]}
    assert set(by_tier) == {"identical", "same_photo"}
    ident = by_tier["identical"]
    assert sorted(p.rsplit("/", 1)[-1] for p in ident["paths"]) == [
        "100000 copy.jpg",
        "100000.jpg",
    ]
    # the bug: the copy in exports/ was suggested
    assert ident["keep"] == str(top / "holidays" / "100000.jpg")
    assert ident["reason"] == "the other is in an export folder (exports)"
    assert ident["keep_reason"] == ident["reason"]
    same = by_tier["same_photo"]
    names = sorted(p.rsplit("/", 1)[-1] for p in same["paths"])
    assert names == ["brick.jpg", "brick_turned.png", "brick_web.jpg"]
    # as large as the turned PNG, another format, and the older file (copy2 kept its time)
    assert same["keep"] == str(top / "holidays" / "brick.jpg")
    assert same["reason"].startswith("larger (512x512 vs 256x256); original: file from")
    s = res["settings"]
    assert s["tiers"] == ["identical", "same_photo", "similar_shots"]
    assert "same_photo" in s["description"] and s["rule"]["similar_score"] == res["threshold"]


def test_tiers_and_reference_options(tiered, capsys):
    top, index = tiered
    res = _run_json(capsys, str(top), "--index", str(index), "--tiers", "same_photo")
    assert [g["tier"] for g in res["groups"]] == ["same_photo"]
    res = _run_json(capsys, str(top), "--index", str(index), "--tiers", "identical",
                    "--reference", str(top / "exports"))  # fmt: skip
    (g,) = res["groups"]
    assert g["keep"] == str(top / "exports" / "100000 copy.jpg")
    assert g["reason"] == "in your reference folder"
    assert res["settings"]["reference"] == [str(top / "exports")]
    capsys.readouterr()
    assert main(["duplicates", str(top), "--index", str(index), "--tiers", "nearly"]) == 2
    assert "--tiers" in capsys.readouterr().err


def test_text_output_names_the_tier(tiered, capsys):
    top, index = tiered
    capsys.readouterr()
    assert main(["duplicates", str(top), "--index", str(index)]) == 0
    out = capsys.readouterr().out
    assert "group 1: identical files (2 images)" in out
    assert "group 2: the same photo (3 images)" in out
    assert "the other is in an export folder (exports)" in out


def test_the_app_starts_from_the_engine_default():
    import inspect

    pytest.importorskip("PySide6")
    from app.gui.duplicates import DuplicatesView
    from engine.workflows.duplicates import DEFAULT_THRESHOLDS

    default = inspect.signature(DuplicatesView.__init__).parameters["default_threshold"].default
    assert default == DEFAULT_THRESHOLDS["similar_shots"]


def test_a_cancelled_search_exits_130(tiered, capsys, monkeypatch):
    import threading
    import types

    import app.commands.duplicates as cmd

    real_event = threading.Event

    def already_set():
        ev = real_event()
        ev.set()  # as after a Ctrl-C
        return ev

    # (the command's own cancel event only: threading.Event itself is used by the
    # threads of the search)
    fake = types.SimpleNamespace(**{k: getattr(threading, k) for k in dir(threading)})
    fake.Event = already_set
    monkeypatch.setattr(cmd, "threading", fake)
    top, index = tiered
    capsys.readouterr()
    assert main(["duplicates", str(top), "--index", str(index), "--json"]) == 130
    captured = capsys.readouterr()
    assert "interrupted" in captured.err and captured.out == ""


def test_related_photos_are_listed_with_their_group(tmp_path, demo_folder, capsys, monkeypatch):
    """A heavily recompressed copy linked only as a similar shot to a photo of a group of
    identical files is in no group: --json lists it under the group's "related", the text
    says where it is, and past RELATED_SHOWN the text only counts the rest."""
    import dataclasses

    import app.commands.duplicates as cmd
    import engine.workflows.duplicates as dups

    photos = tmp_path / "photos"
    (photos / "exports").mkdir(parents=True)
    for name in ("chelsea", "chelsea_jpeg", "coffee", "rocket"):
        shutil.copy(demo_folder / f"{name}.jpg", photos / f"{name}.jpg")
    shutil.copy(demo_folder / "chelsea.jpg", photos / "exports" / "chelsea copy.jpg")
    index = tmp_path / "idx"
    assert main(["index", str(photos), "--index", str(index), "--json"]) == 0
    capsys.readouterr()
    # the 3/4-size quality-18 copy keeps its frame: its features 0.47 px off, its pixels
    # recreated by the compressed-copy test, it is a copy (the group's tier then too) ...
    out = _run_json(capsys, str(photos), "--index", str(index))
    (group,) = [g for g in out["groups"] if str(photos / "chelsea_jpeg.jpg") in g["paths"]]
    assert group["tier"] == "same_photo" and len(group["paths"]) == 3
    # ... and only a similar shot without the kept frame's looser residual
    flat = dups.DEFAULT_RULE.same_photo_residual_px
    rule = dataclasses.replace(dups.DEFAULT_RULE, same_photo_residual_px_frame=flat)
    monkeypatch.setattr(dups, "DEFAULT_RULE", rule)
    (index / "cache" / "pair-evidence.npz").unlink()  # (the pairs checked afresh)
    out = _run_json(capsys, str(photos), "--index", str(index))
    group = next(g for g in out["groups"] if g["tier"] == "identical")
    assert [r["path"] for r in group["related"]] == [str(photos / "chelsea_jpeg.jpg")]
    assert 0 < group["related"][0]["score"] <= 1
    assert main(["duplicates", str(photos), "--index", str(index)]) == 0
    text = capsys.readouterr().out
    assert f"similar, not in this group: {photos / 'chelsea_jpeg.jpg'}" in text
    assert "in no group" in text
    monkeypatch.setattr(cmd, "RELATED_SHOWN", 0)
    assert main(["duplicates", str(photos), "--index", str(index)]) == 0
    text = capsys.readouterr().out
    assert "similar, not in this group" not in text and "… and 1 more similar" in text


def test_a_group_of_shots_keeps_its_best_shot(tmp_path, capsys, monkeypatch):
    """The CLI asks the shot rule for a group of similar shots (as the app): the sharp
    frame of a burst, not the shaken first one the copies' rule calls the original."""
    pytest.importorskip("cv2")
    from engine.collection import Collection
    from engine.workflows.duplicates import DuplicateGroup
    from tests._burst import burst_folder

    photos = tmp_path / "burst"
    paths = burst_folder(photos)
    index = tmp_path / "idx"
    assert main(["index", str(photos), "--index", str(index), "--json"]) == 0
    capsys.readouterr()
    for tier, kept, reason in (("similar_shots", 1, "sharpest ("), ("same_photo", 0, "original")):
        group = DuplicateGroup(paths, [1.0, 0.5], tier)
        monkeypatch.setattr(Collection, "duplicates", lambda self, *a, g=group, **k: [g])
        (out,) = _run_json(capsys, str(photos), "--index", str(index))["groups"]
        assert out["tier"] == tier and out["keep"] == str(paths[kept])
        assert out["reason"].startswith(reason), out["reason"]


def test_members_found_not_to_be_copies_are_printed_and_in_the_json(tiered, capsys, monkeypatch):
    """A group whose members include two photos the search found not to be copies of
    each other (DuplicateGroup.apart) prints the pair and carries it in --json."""
    from engine.collection import Collection
    from engine.workflows.duplicates import DuplicateGroup

    top, index = tiered
    a, b, c = (top / "holidays" / "brick.jpg", top / "exports" / "brick_web.jpg",
               top / "exports" / "brick_turned.png")  # fmt: skip
    group = DuplicateGroup([a, b, c], [1.0, 0.9, 0.8], "same_photo", apart=[(a, c)])
    monkeypatch.setattr(Collection, "duplicates", lambda self, *args, **kw: [group])
    res = _run_json(capsys, str(top), "--index", str(index))
    assert res["groups"][0]["apart"] == [[str(a), str(c)]]
    assert main(["duplicates", str(top), "--index", str(index)]) == 0
    assert f"not copies of each other (another shot?): {a} ~ {c}" in capsys.readouterr().out
