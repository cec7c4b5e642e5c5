"""`robfilt certify` and `robfilt lipschitz` on an ``hf-disk:`` image dataset with non-default columns and on a
5-class timm model given ``--model-arg``, from the CLI, the API and a spec (issue 22, "Done when").

One tiny world serves every surface: 8 grayscale 12x12 images of 5 classes saved with ``save_to_disk`` under the
columns ``pic`` and ``target``, plus a decoy ``label`` column holding other labels (the default column name), and
timm's ``deit_micro_bsa_grc_patch4_28`` built untrained with ``num_classes=5``. Each run covers both cases at once.
The rows must carry the ``target`` labels (so the label column option was read, not the decoy), the model is named
with its model argument, and a 3-class model is refused for labels it cannot output (so the argument reaches the
model). The three surfaces are one vocabulary: the same options give identical rows from each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from robustbench_filters.api import evaluate as api
from robustbench_filters.cli import run as cli_run
from robustbench_filters.gate.run import run_gate
from robustbench_filters.runs.folder import load_run

MODEL = "timm:deit_micro_bsa_grc_patch4_28"
LABEL = f"{MODEL}?num_classes=5"  # a run names a reference with its model arguments merged in
TARGET = [(3 * i + 1) % 5 for i in range(8)]  # every class of five
DECOY = [(t + 1) % 5 for t in TARGET]  # what the default column name ("label") would give
N = 6

#: the options of each kind, as (CLI flag, spec key / API keyword, value): one list, three spellings
COMMON = [("--checkpoint", "checkpoint", "none"), ("--image-column", "image_column", "pic"),
          ("--label-column", "label_column", "target"), ("--n-examples", "n_examples", N)]  # fmt: skip
OPTIONS = {
    "certify": [*COMMON, ("--n0", "n0", 8), ("--n", "n", 40), ("--batch-size", "batch_size", N),
                ("--radii", "radii", [0.0, 0.25]), ("--attack-examples", "attack_examples", 2),
                ("--attack-radii", "attack_radii", [0.25]), ("--attack-steps", "attack_steps", 2),
                ("--attack-draws", "attack_draws", 2)],
    "lipschitz": [*COMMON, ("--method", "method", "power"), ("--power-iters", "power_iters", 10),
                  ("--batch-size", "batch_size", N), ("--no-bounds", "bounds", False)],
}  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder holding the dataset (data/hf) and, later, the spec."""
    from datasets import ClassLabel, Dataset, Features
    from datasets import Image as HFImage
    from PIL import Image

    root = tmp_path_factory.mktemp("surfaces")
    (root / "pyproject.toml").write_text("")  # the project a spec's paths must stay in
    rng = np.random.default_rng(0)
    pics = [Image.fromarray(rng.integers(0, 256, (12, 12), dtype=np.uint8)) for _ in TARGET]
    feats = Features({"pic": HFImage(), "target": ClassLabel(num_classes=5), "label": ClassLabel(num_classes=5)})
    Dataset.from_dict({"pic": pics, "target": TARGET, "label": DECOY}, features=feats).save_to_disk(
        str(root / "data" / "hf")
    )
    return root


def _cli_args(kind: str, world: Path, model_arg: str = "num_classes=5") -> list[str]:
    args = [kind, "--model", MODEL, "--model-arg", model_arg, "--data", f"hf-disk:{world / 'data' / 'hf'}", "-q"]
    for flag, _, value in OPTIONS[kind]:
        if isinstance(value, bool):  # a switch: its flag says the value (--no-bounds)
            args.append(flag)
        else:
            args += [flag, ",".join(f"{v:g}" for v in value) if isinstance(value, list) else str(value)]
    return args


def _keywords(kind: str) -> dict:
    return {key: value for _, key, value in OPTIONS[kind]}


def _checked_rows(out: Path, kind: str) -> pd.DataFrame:
    """The run's per-example rows, after checking the labels came from ``target`` and the model has 5 classes."""
    run = load_run(out)
    rows = run.rows[run.rows["kind"] == "certificate"] if kind == "certify" else run.rows
    assert len(rows) == N and set(rows["model"]) == {LABEL}
    labels = rows.set_index("example_id")["label"].astype(int)
    assert labels.to_dict() == {i: TARGET[i] for i in labels.index}, "the labels must come from --label-column"
    predicted = rows["prediction" if kind == "certify" else "pred"].astype(int)
    assert predicted.between(-1 if kind == "certify" else 0, 4).all()  # -1: CERTIFY abstained
    assert run.summary.checks_summary.fail == 0
    return rows.drop(columns=[c for c in ("kind",) if c in rows.columns]).reset_index(drop=True)


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    key = ["example_id", "sigma"] if "sigma" in a.columns else ["example_id"]
    pd.testing.assert_frame_equal(
        a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True), check_like=True
    )


@pytest.fixture(scope="module")
def cli_rows(world: Path) -> dict[str, pd.DataFrame]:
    out = {}
    for kind in OPTIONS:
        assert cli_run([*_cli_args(kind, world), "--out", str(world / "cli" / kind)]) == 0
        out[kind] = _checked_rows(world / "cli" / kind, kind)
    return out


def test_cli_runs_both_kinds_on_hf_disk_columns_and_a_5_class_timm_model(cli_rows: dict) -> None:
    assert set(cli_rows) == {"certify", "lipschitz"}


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_the_model_argument_and_the_column_options_take_effect(
    world: Path, kind: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Controls: a 3-class model is refused for labels 3 and 4, and without --image-column there is no 'image'."""
    capfd.readouterr()
    assert cli_run([*_cli_args(kind, world, "num_classes=3"), "--out", str(world / "three" / kind)]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the labels of hf-disk:" in err and "returns 3 classes" in err, err
    args = _cli_args(kind, world)
    at = args.index("--image-column")
    assert cli_run([*args[:at], *args[at + 2 :], "--out", str(world / "nocol" / kind)]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no image column 'image'" in err, err
    assert not (world / "three" / kind).exists() and not (world / "nocol" / kind).exists()


def test_api_gives_the_cli_rows(world: Path, cli_rows: dict) -> None:
    data = f"hf-disk:{world / 'data' / 'hf'}"
    api.certify(MODEL, model_args=["num_classes=5"], data=data, out=world / "api" / "certify", **_keywords("certify"))
    api.estimate_lipschitz(MODEL, model_args={"num_classes": 5}, data=data, out=world / "api" / "lipschitz",
                           **_keywords("lipschitz"))  # fmt: skip
    for kind in OPTIONS:
        _same(_checked_rows(world / "api" / kind, kind), cli_rows[kind])


def _toml(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)


def test_a_spec_runs_and_judges_both_kinds_with_the_cli_rows(world: Path, cli_rows: dict) -> None:
    sections = []
    for kind in OPTIONS:
        keys = "".join(f"{key} = {_toml(value)}\n" for _, key, value in OPTIONS[kind])
        sections.append(
            f'[{kind}]\nmodels = ["{MODEL}"]\nmodel_args = ["num_classes=5"]\ndata = "hf-disk:data/hf"\n{keys}'
        )
    spec = world / "robustness.toml"
    spec.write_text(
        'out = "gate"\nsanity = "fail"\n'
        + sections[0]
        + f'[[certify.require]]\nmodels = ["{LABEL}"]\nradius = [0, 0.25]\nmin_certified_acc = 0.0\n'
        + sections[1]
        + "[[lipschitz.require]]\nmax_lipschitz_lower = 1e6\n"
    )
    result = run_gate(spec)
    assert result.passed, [o.detail for o in result.outcomes if o.status != "pass"]
    checks = {(o.kind, o.condition, o.metric) for o in result.outcomes if o.kind == "threshold"}
    assert checks == {
        ("threshold", "certified:sigma0.25@0", "certified_acc"),
        ("threshold", "certified:sigma0.25@0.25", "certified_acc"),
        ("threshold", "-", "lipschitz_lower"),
    }
    assert {o.model for o in result.outcomes if o.kind == "threshold"} == {LABEL}
    for kind in OPTIONS:
        _same(_checked_rows(world / "gate" / kind, kind), cli_rows[kind])
