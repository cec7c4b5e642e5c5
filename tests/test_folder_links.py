"""Each real file of an image folder is indexed once, whatever links point at it.

The rule (robustbench_filters/data/folder.py): links are followed; a file reached twice (symbolic or hard
links) is indexed once, under its first path in the index's order; a directory reached again (a loop, or two
links to one directory) is not walked again; a file reached from two class folders is refused in one line,
since it would count one image under two labels; a broken link is refused in one line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data.folder import FolderSource, index_folder


def _images(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        Image.new("L", (4, 4), color=10 * i).save(folder / name)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Six real images, three per class."""
    root = tmp_path / "data"
    _images(root / "cat", ["a.png", "b.png", "c.png"])
    _images(root / "dog", ["d.png", "e.png", "f.png"])
    return root


def test_a_directory_loop_is_walked_once(tree: Path) -> None:
    os.symlink("..", tree / "cat" / "up")  # cat/up -> data: loops back over both classes
    os.symlink(".", tree / "dog" / "self")  # dog/self -> dog
    (tree / "dog" / "sub").mkdir()
    os.symlink("../..", tree / "dog" / "sub" / "top")
    files, labels, classes = index_folder(tree)
    assert files == ["cat/a.png", "cat/b.png", "cat/c.png", "dog/d.png", "dog/e.png", "dog/f.png"]
    assert labels.tolist() == [0, 0, 0, 1, 1, 1] and classes == ["cat", "dog"]


def test_a_link_to_a_file_already_indexed_counts_once_under_its_first_path(tree: Path) -> None:
    os.symlink("c.png", tree / "cat" / "0-link.png")  # sorts first, so it is the path kept
    os.link(tree / "dog" / "d.png", tree / "dog" / "z-hard.png")  # a hard link is the same file too
    (tree / "cat" / "more").mkdir()
    os.symlink("../a.png", tree / "cat" / "more" / "a-again.png")
    files, labels, _ = index_folder(tree)
    assert files == ["cat/0-link.png", "cat/a.png", "cat/b.png", "dog/d.png", "dog/e.png", "dog/f.png"]
    assert labels.tolist() == [0, 0, 0, 1, 1, 1]


def test_a_file_reached_from_two_class_folders_is_refused(tree: Path) -> None:
    os.symlink("../cat/a.png", tree / "dog" / "g.png")
    with pytest.raises(RobfiltError, match=r"dog/g.png and cat/a.png are one file.*two labels") as err:
        index_folder(tree)
    assert "\n" not in str(err.value)


def test_a_directory_link_into_another_class_is_refused(tree: Path) -> None:
    os.symlink("../cat", tree / "dog" / "cats")
    with pytest.raises(RobfiltError, match="two labels"):
        index_folder(tree)


def test_two_class_names_for_one_directory_are_refused(tree: Path) -> None:
    os.symlink("cat", tree / "kitten")
    with pytest.raises(RobfiltError, match="two labels"):
        index_folder(tree)


def test_links_out_of_the_folder_are_followed(tree: Path, tmp_path: Path) -> None:
    _images(tmp_path / "elsewhere", ["x.png", "y.png"])
    os.symlink(tmp_path / "elsewhere", tree / "emu")  # a class folder that is a link
    os.symlink(tmp_path / "elsewhere" / "x.png", tree / "cat" / "x.png")  # and a file link out: refused,
    with pytest.raises(RobfiltError, match="two labels"):  # since emu/x.png is the same file
        index_folder(tree)
    (tree / "cat" / "x.png").unlink()
    files, labels, classes = index_folder(tree)
    assert classes == ["cat", "dog", "emu"] and files[-2:] == ["emu/x.png", "emu/y.png"] and len(files) == 8


def test_a_broken_link_is_refused_in_one_line(tree: Path) -> None:
    os.symlink("missing.png", tree / "cat" / "gone.png")
    with pytest.raises(RobfiltError, match=r"cat/gone.png is a broken link"):
        index_folder(tree)


def test_the_source_decodes_each_real_image_once(tree: Path) -> None:
    os.symlink("..", tree / "cat" / "up")
    src = FolderSource(tree, num_workers=0)
    assert len(src) == 6
    x, y = src.take(list(range(6)))
    assert x.shape[0] == 6 and y.tolist() == [0, 0, 0, 1, 1, 1]


def _cli(tmp_path: Path, capfd, folder: Path, n: int) -> tuple[int, str, str]:
    from _untrusted_models import write_models

    from robustbench_filters.cli import run

    models = write_models(tmp_path)
    code = run(["attack", "--model", f"{models}:build?classes=2", "--checkpoint", "none", "--attack", "fgsm",
                "--eps", "0.03", "--data", f"imagefolder:{folder}", "--img-size", "4", "--num-workers", "0",
                "--n-examples", str(n), "--out", str(tmp_path / "run"), "-q", "--json", "--allow-failed-checks"])  # fmt: skip
    cap = capfd.readouterr()
    return code, cap.out, cap.err


def test_cli_counts_each_real_image_once_and_refuses_a_cross_class_link(tree: Path, tmp_path: Path, capfd) -> None:
    import json

    os.symlink("..", tree / "cat" / "up")
    code, out, err = _cli(tmp_path, capfd, tree, 6)
    assert code == 0, err
    (model,) = json.loads(out)["models"].values()
    assert model["clean"]["n"] == 6
    os.symlink("../cat/a.png", tree / "dog" / "g.png")
    (tmp_path / "b").mkdir()
    code, out, err = _cli(tmp_path / "b", capfd, tree, 6)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "two labels" in lines[0], err
    assert json.loads(out)["exit_code"] == 2
