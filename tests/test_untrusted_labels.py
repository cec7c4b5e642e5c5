"""Labels are class indices of the model, and the caller's images are never modified.

The class count is the model's (its logits' last dimension), never the largest label + 1 nor the folder count:
data that use a subset of the classes run, a label the model has no logit for is refused by value, and labels
that are not whole numbers (text, fractions, booleans) are refused in one line. Images that require grad are
detached, and the caller's tensor is the same afterwards.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _untrusted_models import build, level_data, write_level_folder
from torch.utils.data import Dataset

from robustbench_filters.api.benchmark import benchmark
from robustbench_filters.api.evaluate import certify, estimate_lipschitz, evaluate
from robustbench_filters.configs import CertifyConfig, ImageAttackConfig
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data.labels import label_index, label_indices

FAST = dict(eps=[0.03], steps=1, checkpoint="none")
SUBSET = [0, 1, 2, 3, 4, 5, 6, 8]  # 8 images labelled within 0..8 for a 10-logit model


class Pairs(Dataset):
    def __init__(self, x: torch.Tensor, labels: list) -> None:
        self.x, self.labels = x, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.x[i], self.labels[i]


def _on_folder(model: torch.nn.Module, folder, n: int):  # noqa: ANN001, ANN202
    config = ImageAttackConfig(models=(model,), attacks=("fgsm",), eps=(0.03,), data=f"imagefolder:{folder}",
                               n_examples=n, steps=1, checkpoint="none", img_size=8, num_workers=0)  # fmt: skip
    return evaluate(config=config)


# --- the class count is the model's --------------------------------------------------------------------------------


def test_a_subset_of_the_classes_runs_with_the_model_class_count(monkeypatch) -> None:
    import torchattacks

    seen: list[int] = []
    real = torchattacks.APGDT.__init__

    def spy(self, model, *args, **kwargs):  # noqa: ANN001, ANN202
        seen.append(kwargs["n_classes"])
        real(self, model, *args, **kwargs)

    monkeypatch.setattr(torchattacks.APGDT, "__init__", spy)
    x, y = level_data(SUBSET)
    res = evaluate(build(), ["apgd-t"], data=(x, y), n_examples=8, eps=[0.01], steps=1, checkpoint="none")
    assert res.summary.models["model0"].clean.acc == 1.0
    assert seen and set(seen) == {10}  # APGD-T targets the model's 10 classes, not max(label) + 1 = 9


def test_subset_runs_in_benchmark_certify_corruptions_and_lipschitz() -> None:
    x, y = level_data(SUBSET)
    assert benchmark(build(), data=(x, y), eps=0.03, attack="fgsm").clean.acc == 1.0
    config = CertifyConfig(models=(build(),), sigmas=(0.1,), data=(x, y), n_examples=8, n0=4, n=8,
                           checkpoint="none", attack_examples=0)  # fmt: skip
    assert len(certify(config=config).rows) == 8
    res = evaluate(build(), ["corruption:contrast"], data=(x, y), n_examples=8, checkpoint="none", severities=[1])
    assert res.summary.models["model0"].clean.acc == 1.0
    lip = estimate_lipschitz([build()], n_examples=8, bounds=False, inputs=x, input_labels=y, checkpoint=None)
    assert lip.examples.label.tolist() == SUBSET


def test_a_dataset_with_subset_labels_runs() -> None:
    x, y = level_data(SUBSET)
    res = evaluate(build(), ["fgsm"], data=Pairs(x, y.tolist()), n_examples=8, **FAST)
    assert res.summary.models["model0"].clean.acc == 1.0


def test_hf_disk_labels_that_stop_at_8_run(tmp_path) -> None:
    from datasets import Array3D, Features, Value
    from datasets import Dataset as HFDataset

    x, y = level_data(SUBSET)
    feats = Features({"image": Array3D((1, 8, 8), "float32"), "label": Value("int64")})
    HFDataset.from_dict({"image": x.numpy(), "label": y.tolist()}, features=feats).save_to_disk(str(tmp_path / "hf"))
    res = evaluate(build(), ["fgsm"], data=f"hf-disk:{tmp_path / 'hf'}", n_examples=8, **FAST)
    assert res.summary.models["model0"].clean.acc == 1.0


def test_a_folder_with_fewer_class_folders_than_classes_runs_when_named_by_index(tmp_path) -> None:
    folder = write_level_folder(tmp_path / "digits", [str(k) for k in range(9)], per_class=1)
    res = _on_folder(build(), folder, 9)
    assert res.summary.models["model0"].clean.acc == 1.0


def test_a_folder_subset_whose_names_are_not_indices_is_refused(tmp_path) -> None:
    folder = write_level_folder(tmp_path / "named", ["cat", "dog", "emu"], per_class=1)
    with pytest.raises(RobfiltError, match=r"3 class folders \(cat, dog, emu\).*10 classes.*name the folders"):
        _on_folder(build(), folder, 3)


# --- labels outside the model's classes, and labels that are not indices ------------------------------------------


@pytest.mark.parametrize("top", [10, 12])
def test_a_label_the_model_has_no_logit_for_is_refused_by_value(top: int) -> None:
    x, _ = level_data([0, 1, 2, 3])
    y = torch.tensor([0, 1, 2, top])
    with pytest.raises(RobfiltError, match=rf"include {top}.*returns 10 classes.*0\.\.9") as err:
        evaluate(build(), ["fgsm"], data=(x, y), n_examples=4, **FAST)
    assert "--" not in str(err.value)  # the API's error names no CLI flag
    with pytest.raises(RobfiltError, match=rf"include {top}"):
        estimate_lipschitz([build()], n_examples=4, bounds=False, inputs=x, input_labels=y, checkpoint=None)


def test_a_folder_with_more_class_folders_than_classes_is_refused(tmp_path) -> None:
    folder = write_level_folder(tmp_path / "many", [str(k) for k in range(4)], per_class=1)
    with pytest.raises(RobfiltError, match=r"include 3 \(class folder '3'\).*returns 3 classes"):
        _on_folder(build(classes=3), folder, 4)


BAD_LABELS = {
    "text": (["cat", "dog", "cat", "dog"], "text"),
    "fraction": ([0.0, 1.5, 2.0, 3.0], "1.5.* not a whole number"),
    "bool": ([True, False, True, False], "boolean"),
    "nan": ([0.0, float("nan"), 1.0, 2.0], "(?i:nan)"),
    "negative": ([0, -1, 2, 3], "-1"),
    "mixed objects": (np.array([0, "a", 2, 3], dtype=object), "text"),
}


@pytest.mark.parametrize("case", sorted(BAD_LABELS))
def test_labels_that_are_not_class_indices_are_refused_in_one_line(case: str) -> None:
    labels, needle = BAD_LABELS[case]
    x, _ = level_data([0, 1, 2, 3])
    for data in ((x, labels), Pairs(x, list(labels))):
        with pytest.raises(RobfiltError, match="labels? .*" + needle) as err:
            evaluate(build(), ["fgsm"], data=data, n_examples=4, **FAST)
        assert "\n" not in str(err.value)
    with pytest.raises(RobfiltError, match=needle):
        benchmark(build(), data=(x, labels), eps=0.03, attack="fgsm")


def test_whole_number_floats_and_numpy_ints_are_labels() -> None:
    assert label_indices(np.array([0.0, 3.0, 9.0])).tolist() == [0, 3, 9]
    assert label_indices([np.int32(2), 5]).tolist() == [2, 5]
    assert label_index(torch.tensor(4)) == 4 and label_index(np.float64(2.0)) == 2 and label_index([7]) == 7
    with pytest.raises(RobfiltError, match="not one number"):
        label_index(torch.tensor([1, 2]))


# --- images: detached, never modified in place -------------------------------------------------------------------


def test_images_that_require_grad_work_and_are_not_modified() -> None:
    x, y = level_data(SUBSET)
    x[0, 0, 0, 0] = -1e-7  # float rounding below 0: robfilt clamps its own copy, never the caller's
    x = x.requires_grad_(True)
    before = x.detach().clone()
    res = evaluate(build(), ["fgsm"], data=(x, y), n_examples=8, **FAST)
    assert res.summary.models["model0"].clean.acc == 1.0
    assert benchmark(build(), data=(x, y), eps=0.03, attack="fgsm").clean.acc == 1.0
    assert torch.equal(x.detach(), before) and x.grad is None and x.is_leaf
    lip = estimate_lipschitz([build()], n_examples=2, bounds=False, inputs=x[:2], checkpoint=None)
    assert len(lip.examples) == 2 and torch.equal(x.detach(), before)


def test_numpy_images_are_not_modified() -> None:
    x, y = level_data(SUBSET)
    arr = x.numpy().copy()
    arr[0, 0, 0, 0] = 1 + 1e-7
    before = arr.copy()
    evaluate(build(), ["fgsm"], data=(arr, y.numpy()), n_examples=8, **FAST)
    assert np.array_equal(arr, before)


def test_cli_refuses_a_label_the_model_has_no_logit_for_in_one_json_line(tmp_path, capfd) -> None:
    import json

    from _untrusted_models import write_models

    from robustbench_filters.cli import run

    models = write_models(tmp_path)
    folder = write_level_folder(tmp_path / "many", [str(k) for k in range(4)], per_class=1)
    code = run(["attack", "--model", f"{models}:build?classes=3", "--checkpoint", "none", "--attack", "fgsm",
                "--eps", "0.03", "--data", f"imagefolder:{folder}", "--img-size", "8", "--n-examples", "4",
                "--out", str(tmp_path / "run"), "-q", "--json"])  # fmt: skip
    cap = capfd.readouterr()
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "include 3 (class folder '3')" in lines[0], cap.err
    assert json.loads(cap.out)["exit_code"] == 2 and not (tmp_path / "run").exists()
