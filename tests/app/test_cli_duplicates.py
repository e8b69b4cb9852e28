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
