"""Class maps: wnid folders get ImageNet-1k indices for a 1000-class model, other names a class-map file.

The check that the labels are right is a model that is right only under them: ``Oracle`` reads a grey image's
brightness (folder k holds images at level (20 k + 10) / 255) and puts its highest logit on the class index it
was told folder k has. With the true labels its clean accuracy is 100%; told the folder positions instead, it is right only where an
index equals its position.
The commands of docs/own-models.md's class-map section run through the CLI as written (with flags that shrink the
work appended).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import ImageNetInfo

from robustbench_filters.api.benchmark import benchmark
from robustbench_filters.api.evaluate import certify, estimate_lipschitz, evaluate
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data.class_map import settle_folder_labels
from robustbench_filters.data.sources import open_image_source

ROOT = Path(__file__).resolve().parents[1]
WNIDS = ("n01440764", "n02102040", "n02979186", "n03000684", "n03028079")  # Imagenette's first five
IMAGENET = ImageNetInfo().label_names()
INDICES = [IMAGENET.index(w) for w in WNIDS]  # what the labels must be: 0, 217, 482, 491, 497
NAMES = ("tench", "springer", "cassette", "chainsaw", "church")

ORACLE = """
import torch
from torch import nn


class Oracle(nn.Module):
    \"\"\"Class targets[k] for images at grey level (20 k + 10) / 255; every other class far below.\"\"\"

    def __init__(self, targets, classes=1000):
        super().__init__()
        centres = torch.full((classes,), 10.0)
        for k, t in enumerate(targets):
            centres[t] = (20 * k + 10) / 255
        self.register_buffer("centres", centres)
        self.scale = nn.Parameter(torch.tensor(2000.0))

    def forward(self, x):
        m = x.flatten(1).mean(1, keepdim=True)
        return -self.scale * (m - self.centres) ** 2


def build(targets=(0,), classes=1000):
    return Oracle([int(t) for t in targets], int(classes)).eval()
"""
_space: dict = {}
exec(compile(ORACLE, "<oracle>", "exec"), _space)  # noqa: S102 - the test's own source
oracle = _space["build"]
FAST = dict(steps=1, checkpoint="none", img_size=8, num_workers=0, n_examples=None)


def _folder(root: Path, names: tuple[str, ...], per_class: int = 2) -> Path:
    for k, name in enumerate(names):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(np.full((12, 12, 3), 20 * k + 10, dtype=np.uint8)).save(root / name / f"{i}.png")
    return root


@pytest.fixture
def nette(tmp_path: Path) -> Path:
    return _folder(tmp_path / "nette", WNIDS)


@pytest.fixture
def named(tmp_path: Path) -> Path:
    return _folder(tmp_path / "named", NAMES)


def _acc(res) -> float:  # noqa: ANN001
    (summary,) = res.summary.models.values()
    return summary.clean.acc


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


# --- wnid folders ------------------------------------------------------------------------------------------------


def test_wnid_folders_get_their_imagenet_indices_for_a_1000_class_model(nette: Path) -> None:
    src = open_image_source(f"imagefolder:{nette}", img_size=8, num_workers=0)
    assert src.y.tolist() == [k for k in range(5) for _ in range(2)]  # positions until a model's classes are known
    record = settle_folder_labels(src, [1000], ["m"], "nette")
    assert src.y.tolist() == [i for i in INDICES for _ in range(2)]
    assert record is not None and record["class_map"] == "imagenet-1k wnids" and len(record["sha256"]) == 64


def test_a_wnid_subset_attacked_with_a_1000_class_model_is_labelled_by_imagenet(nette: Path, tmp_path: Path) -> None:
    res = evaluate(oracle(INDICES), ["fgsm"], [1 / 255], data=f"imagefolder:{nette}", out=tmp_path / "run", **FAST)
    assert _acc(res) == 1.0  # right only under the ImageNet indices
    labels = _manifest(tmp_path / "run")["config"]["examples"]["examples"]["labels"]
    assert labels["class_map"] == "imagenet-1k wnids"
    positions = evaluate(oracle(range(5)), ["fgsm"], [1 / 255], data=f"imagefolder:{nette}", **FAST)
    assert _acc(positions) == 0.2  # right by position: only tench, whose ImageNet index is 0 too


def test_wnid_refusals(nette: Path, tmp_path: Path) -> None:
    data = f"imagefolder:{nette}"
    with pytest.raises(RobfiltError, match=r"are ImageNet wnids .*returns 10 classes.*pass class_map FILE") as err:
        evaluate(oracle(range(5), classes=10), ["fgsm"], [0.01], data=data, **FAST)
    assert "\n" not in str(err.value)
    with pytest.raises(RobfiltError, match=r"by position by model model1 \(10 classes\); run them separately"):
        evaluate([oracle(INDICES), oracle(range(5), classes=10)], ["fgsm"], [0.01], data=data, **FAST)
    foreign = _folder(tmp_path / "foreign", ("n01440764", "n99999999"))
    with pytest.raises(RobfiltError, match=r"class folder 'n99999999' of .* is not an ImageNet-1k synset"):
        evaluate(oracle([0, 1]), ["fgsm"], [0.01], data=f"imagefolder:{foreign}", **FAST)
    # one folder per class of a 5-class model: torchvision's positional rule, as for any names
    assert _acc(evaluate(oracle(range(5), classes=5), ["fgsm"], [0.01], data=data, **FAST)) == 1.0


# --- folders named by class index, and positions ---------------------------------------------------------------

DIGITS = tuple(str(k) for k in range(11))  # sorted as text: 0, 1, 10, 2, ...: positions would mislabel 9 of 11


def test_folders_named_by_class_index_are_labelled_by_their_numbers(tmp_path: Path, capfd) -> None:  # noqa: ANN001
    folder = _folder(tmp_path / "digits", DIGITS)  # folder "k" holds level k: class k of the oracle
    res = evaluate(oracle(range(11), classes=11), ["fgsm"], [0.01], data=f"imagefolder:{folder}",
                   out=tmp_path / "api", **FAST)  # fmt: skip
    assert _acc(res) == 1.0  # by position it would be 2/11 (only 0 and 1 are in place)
    labels = _manifest(tmp_path / "api")["config"]["examples"]["examples"]["labels"]
    assert labels["class_map"] == "folder names are class indices"
    (tmp_path / "oracle.py").write_text(ORACLE)
    argv = ["attack", "--model", f"{tmp_path / 'oracle.py'}:build?targets=[{','.join(DIGITS)}]&classes=11",
            "--attack", "fgsm", "--eps", "0.01", "--steps", "1", "--data", f"imagefolder:{folder}", "--img-size",
            "8", "--num-workers", "0", "--out", str(tmp_path / "cli"), "--json"]  # fmt: skip
    assert run(argv) == 0
    (model,) = json.loads(capfd.readouterr().out)["models"].values()
    assert model["clean"]["acc"] == 1.0


def test_a_subset_named_by_class_index_takes_those_indices(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "subset", ("3", "7", "12"))
    res = evaluate(oracle([3, 7, 12], classes=20), ["fgsm"], [0.01], data=f"imagefolder:{folder}", **FAST)
    assert _acc(res) == 1.0


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (("0", "1", "10"), "the labels of imagefolder:.* include 10 \\(class folder '10'\\), but model model0 returns "
                           "10 classes"),
        (("0", "1", "cat"), "mix class indices \\(0, 1\\) and names \\(cat\\).*pass class_map FILE"),
        (("1", "01"), "class folders '01' and '1' of .* both name class 1"),
    ],
)  # fmt: skip
def test_class_index_names_that_cannot_be_labels_are_refused(tmp_path: Path, capfd, names, message) -> None:  # noqa: ANN001
    folder = _folder(tmp_path / "f", names)
    with pytest.raises(RobfiltError, match=message) as err:
        evaluate(oracle(range(3), classes=10), ["fgsm"], [0.01], data=f"imagefolder:{folder}", **FAST)
    assert "\n" not in str(err.value) and "--" not in str(err.value)
    (tmp_path / "oracle.py").write_text(ORACLE)
    out = tmp_path / "run"
    code = run(["attack", "--model", f"{tmp_path / 'oracle.py'}:build?targets=[0,1,2]&classes=10", "--attack",
                "fgsm", "--eps", "0.01", "--data", f"imagefolder:{folder}", "--img-size", "8", "--num-workers", "0",
                "--quiet", "--out", str(out)])  # fmt: skip
    err = capfd.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and not out.exists(), err
    assert "pass --class-map FILE" in err if "cat" in names else "class_map" not in err


def test_positional_labels_are_recorded_and_shown_once(named: Path, tmp_path: Path, capfd) -> None:  # noqa: ANN001
    (tmp_path / "oracle.py").write_text(ORACLE)
    out = tmp_path / "run"
    code = run(["attack", "--model", f"{tmp_path / 'oracle.py'}:build?targets=[0,1,2,3,4]&classes=5", "--attack",
                "fgsm", "--eps", "0.01", "--data", f"imagefolder:{named}", "--img-size", "8", "--num-workers", "0",
                "--out", str(out)])  # fmt: skip
    err = capfd.readouterr().err
    assert code == 0, err
    labels = _manifest(out)["config"]["examples"]["examples"]["labels"]
    assert labels == {"class_map": "sorted folder names", "labels": {n: i for i, n in enumerate(sorted(NAMES))}}
    shown = " ".join(err.split())  # the log wraps long lines
    assert shown.count("the positions of the sorted class-folder names") == 1, err
    assert "cassette=0, chainsaw=1, church=2" in shown and "pass --class-map FILE" in shown


# --- class-map files ---------------------------------------------------------------------------------------------


def _write_map(folder: Path, kind: str, pairs: dict[str, int]) -> Path:
    path = folder / f"nette.{kind}"
    if kind == "json":
        path.write_text(json.dumps(pairs))
    else:
        sep = "," if kind == "csv" else "\t"
        path.write_text("".join(f"{k}{sep}{v}\n" for k, v in pairs.items()))
    return path


@pytest.mark.parametrize("kind", ["json", "csv", "tsv"])
def test_a_class_map_labels_other_names(named: Path, tmp_path: Path, kind: str) -> None:
    path = _write_map(tmp_path, kind, {**dict(zip(NAMES, INDICES, strict=True)), "absent folder": 3})
    out = tmp_path / "run"
    res = evaluate(oracle(INDICES), ["fgsm"], [0.01], data=f"imagefolder:{named}", class_map=path, out=out, **FAST)
    assert _acc(res) == 1.0
    import hashlib

    labels = _manifest(out)["config"]["examples"]["examples"]["labels"]
    assert labels == {"class_map": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def test_a_class_map_wins_over_wnids_and_changes_the_fingerprint(nette: Path, tmp_path: Path) -> None:
    targets = [7, 8, 9, 10, 11]
    path = _write_map(tmp_path, "json", dict(zip(WNIDS, targets, strict=True)))
    argv = ["attack", "--model", f"{tmp_path / 'oracle.py'}:build?targets=[7,8,9,10,11]", "--attack", "fgsm",
            "--eps", "0.01", "--steps", "1", "--data", f"imagefolder:{nette}", "--img-size", "8",
            "--num-workers", "0", "--quiet"]  # fmt: skip
    (tmp_path / "oracle.py").write_text(ORACLE)
    assert run([*argv, "--class-map", str(path), "--out", str(tmp_path / "a"), "--json"]) == 0
    assert run([*argv, "--out", str(tmp_path / "b"), "--json"]) == 0
    a, b = _manifest(tmp_path / "a"), _manifest(tmp_path / "b")
    assert a["fingerprint"] != b["fingerprint"]
    assert a["config"]["examples"]["examples"]["data"] != b["config"]["examples"]["examples"]["data"]
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert [m["clean"]["acc"] for m in summary["models"].values()] == [1.0]  # 7..11 are right only by the map
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert [m["clean"]["acc"] for m in summary["models"].values()] == [0.0]  # wnid indices 0, 217, ...


def test_every_image_run_kind_takes_the_class_map(named: Path, tmp_path: Path) -> None:
    path = _write_map(tmp_path, "csv", dict(zip(NAMES, INDICES, strict=True)))
    data = {"data": f"imagefolder:{named}", "class_map": str(path), "img_size": 8, "num_workers": 0}
    res = evaluate(oracle(INDICES), ["corruption:contrast"], severities=[1], checkpoint="none", **data)
    assert _acc(res) == 1.0
    res = certify(oracle(INDICES), [0.01], n0=4, n=8, attack_examples=0, checkpoint="none", **data)
    assert sorted(set(res.rows.label)) == INDICES and (res.rows.top_class_n0 == res.rows.label).all()
    assert benchmark(oracle(INDICES), eps=0.01, attack="fgsm", **data).clean.acc == 1.0
    lip = estimate_lipschitz(
        [oracle(INDICES)], n_examples=10, bounds=False, checkpoint=None, out=tmp_path / "l", **data
    )
    assert sorted(lip.examples.label.tolist()) == sorted(i for i in INDICES for _ in range(2))
    (selection,) = _manifest(tmp_path / "l")["config"]["examples"].values()  # the labels are in the fingerprint
    assert selection["labels"]["class_map"] == str(path) and len(selection["labels"]["labels_sha256"]) == 16


# --- bad maps: one line, exit 2, naming the option ---------------------------------------------------------------

BAD = [
    ("m.json", '{"tench": 0, "tench": 1}', "names 'tench' twice"),
    ("m.csv", "tench,0\ntench,1\n", "names 'tench' twice"),
    ("m.json", '{"tench": 3.0}', "not a class index"),
    ("m.json", '{"tench": "3"}', "not a class index"),
    ("m.json", '{"tench": true}', "not a class index"),
    ("m.json", '{"tench": -1}', "class indices start at 0"),
    ("m.csv", "tench,2.5\n", "not a class index"),
    ("m.csv", "folder,index\ntench,0\n", "(the file has no header row)"),
    ("m.tsv", "tench\t0\textra\n", "has 3 fields"),
    ("m.json", "[1, 2]", "one JSON object"),
    ("m.json", "{}", "maps no folder"),
    ("m.json", "{", "not valid JSON"),
    ("m.txt", "tench,0\n", "unknown format '.txt'"),
    ("missing.json", None, "cannot be read"),
    ("m.json", json.dumps({n: i for n, i in zip(NAMES[:4], INDICES, strict=False)}), "no entry for class folder 'church'"),
    ("m.json", json.dumps({**dict(zip(NAMES, INDICES, strict=True)), "church": 1000}), "maps class folder 'church' to 1000, but model"),
    ("m.json", json.dumps({**dict(zip(NAMES, INDICES, strict=True)), "church": 2**63}), "which is no model's class index"),
    ("m.csv", "tench,99999999999999999999\n", "which is no model's class index"),
]  # fmt: skip


def _bad_map(folder: Path, name: str, content: str | None) -> Path:
    path = folder / name
    if content is not None:
        path.write_text(content)
    return path


@pytest.mark.parametrize(("name", "content", "message"), BAD, ids=[m for _, _, m in BAD])
def test_a_bad_map_is_refused_in_one_line_by_the_api(named: Path, tmp_path, name, content, message) -> None:  # noqa: ANN001
    path = _bad_map(tmp_path, name, content)
    with pytest.raises(RobfiltError) as err:
        evaluate(oracle(INDICES), ["fgsm"], [0.01], data=f"imagefolder:{named}", class_map=str(path), **FAST)
    text = str(err.value)
    assert message in text and "\n" not in text and re.search(r"\bclass_map\b", text), text


@pytest.mark.parametrize(("name", "content", "message"), BAD[::3], ids=[m for _, _, m in BAD[::3]])
def test_a_bad_map_is_refused_in_one_line_by_the_cli(named: Path, tmp_path, capfd, name, content, message) -> None:  # noqa: ANN001
    path = _bad_map(tmp_path, name, content)
    (tmp_path / "oracle.py").write_text(ORACLE)
    code = run(["attack", "--model", f"{tmp_path / 'oracle.py'}:build?targets=[0,217,482,491,497]", "--attack",
                "fgsm", "--eps", "0.01", "--steps", "1", "--data", f"imagefolder:{named}", "--class-map", str(path),
                "--img-size", "8", "--num-workers", "0", "--quiet"])  # fmt: skip
    err = capfd.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err and "--class-map" in err, err


def test_a_class_map_applies_to_image_folders_only(tmp_path: Path) -> None:
    path = _write_map(tmp_path, "json", {"tench": 0})
    with pytest.raises(RobfiltError, match=r"class_map applies to imagefolder: data"):
        evaluate("deit", ["fgsm"], [0.01], data="fashion-mnist", class_map=str(path), checkpoint="none")


# --- specs -------------------------------------------------------------------------------------------------------


def test_a_spec_class_map_is_read_from_the_spec_folder(named: Path, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    from robustbench_filters.gate.run import run_gate

    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.chdir(tmp_path)  # the map is found from the spec's folder, not from here
    (tmp_path / "pyproject.toml").write_text("")
    (gate / "oracle.py").write_text(ORACLE)
    _write_map(gate, "csv", dict(zip(NAMES, INDICES, strict=True)))
    section = (
        f'allow_code = true\n[image]\nmodels = ["{gate}/oracle.py:build?targets=[0,217,482,491,497]"]\n'
        'attacks = ["fgsm"]\neps = [0.01]\nsteps = 1\ncheckpoint = "none"\ndata = "imagefolder:../named"\n'
        'img_size = 8\nnum_workers = 0\nclass_map = "nette.csv"\n[[image.require]]\nmin_acc = 1.0\nmode = "point"\n'
    )  # point: any mislabelled image fails the gate
    spec = gate / "robustness.toml"
    spec.write_text(section)
    result = run_gate(spec, out=tmp_path / "a")
    assert result.passed and result.count("pass") >= 1
    run = next((tmp_path / "a").glob("*/manifest.json"))
    labels = json.loads(run.read_text())["config"]["examples"]["examples"]["labels"]
    assert labels["class_map"] == str(gate / "nette.csv")
    spec.write_text(section.replace('class_map = "nette.csv"\n', ""))
    with pytest.raises(RobfiltError, match=r"position is not its class index; pass class_map FILE"):
        run_gate(spec, out=tmp_path / "b")


# --- the documented commands -------------------------------------------------------------------------------------


def _doc_commands() -> list[list[str]]:
    text = (ROOT / "docs" / "own-models.md").read_text()
    section = text.split("### Class maps:", 1)[1].split("\n### ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    return [shlex.split(line)[1:] for line in block.group(1).splitlines() if line.startswith("robfilt ")]


def test_the_documented_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    import safetensors.torch
    import timm

    commands = _doc_commands()
    assert len(commands) == 2 and all("timm:resnet18" in c for c in commands)
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    safetensors.torch.save_file(timm.create_model("resnet18").state_dict(), "resnet18.safetensors")
    _folder(tmp_path / "imagenette2-160" / "val", WNIDS[:3], per_class=1)
    _folder(tmp_path / "nette-named", NAMES[:3], per_class=1)
    _write_map(tmp_path, "json", dict(zip(NAMES, INDICES, strict=True)))
    for argv in commands:
        out = tmp_path / "runs" / argv[argv.index("--data") + 1].split(":", 1)[1].replace("/", "_")
        assert run([*argv, "--img-size", "32", "--steps", "1", "--num-workers", "0", "--out", str(out), "-q"]) == 0
        labels = _manifest(out)["config"]["examples"]["examples"]["labels"]
        assert labels["class_map"] == ("nette.json" if "--class-map" in argv else "imagenet-1k wnids")
    capsys.readouterr()
