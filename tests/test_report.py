"""Reports: hand-checked statistics, every table and figure type, index.md, and one-line errors (exit code 2)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_summaries import summary_for

from robustbench_filters.cli import run as cli_run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.lipschitz.seqlen_run import SeqlenConfig, sequence_length_run
from robustbench_filters.report import build_report
from robustbench_filters.report import figures as F
from robustbench_filters.report import tables as T
from robustbench_filters.report.attention import AttentionMaps
from robustbench_filters.report.style import Palette, variant_key
from robustbench_filters.runs.folder import RunWriter

Z = 1.959963984540054


def write_run(out: Path, kind: str, rows: pd.DataFrame, config: dict, family: str | None = None) -> Path:
    """A finished run folder with the given rows (what the engines write, minus the work)."""
    extra = {"family": family} if family else None
    with RunWriter(out, kind, config, seed=config.get("seed", 0), extra=extra) as w:
        w.write_part("all", rows)
        w.finish(rows, summary_for(kind, family, rows))
    return out


def image_rows(correct: dict[tuple[str, str, float], list[bool]]) -> pd.DataFrame:
    """Rows in the engine's schema from {(model, attack, eps): per-example correctness}."""
    recs = []
    for (model, attack, eps), flags in correct.items():
        for i, ok in enumerate(flags):
            recs.append(
                {
                    "model": model,
                    "example_id": i,
                    "kind": "adversarial",
                    "attack": attack,
                    "eps": eps,
                    "norm": "linf",
                    "correct": bool(ok),
                    "clean_correct": True,
                    "pert_norm": eps,
                    "margin": 0.0,
                    "loss": 0.0,
                    "in_box": True,
                    "fooled_by": "",
                }  # fmt: skip
            )
    return pd.DataFrame(recs)


def image_config(ids: str = "ids-a", n: int = 20) -> dict:
    return {"data": "fashion-mnist", "data_checksum": "sum-a", "example_ids_sha256": ids, "n_examples": n, "seed": 0}


def flags(n: int, right: set[int]) -> list[bool]:
    return [i in right for i in range(n)]


@pytest.fixture
def paired_rows() -> pd.DataFrame:
    """20 examples. pgd@0.01: b=3, c=0. pgd@0.02: b=10, c=2. clean: deit 10/20, deit-grc 20/20."""
    n = 20
    return image_rows(
        {
            ("deit", "clean", 0.0): flags(n, set(range(10))),
            ("deit-grc", "clean", 0.0): flags(n, set(range(20))),
            ("deit", "pgd", 0.01): flags(n, {0, 1, 2, 3, 4}),  # 5 right
            ("deit-grc", "pgd", 0.01): flags(n, {3, 4}),  # only deit right on 0,1,2 -> b=3, c=0
            ("deit", "pgd", 0.02): flags(n, set(range(12))),  # 12 right
            ("deit-grc", "pgd", 0.02): flags(n, {0, 1, 12, 13}),  # b = 2..11 (10), c = 12,13 (2)
        }
    )


def test_wilson_intervals_match_hand_values(paired_rows: pd.DataFrame) -> None:
    acc = T.accuracy_table(paired_rows)
    row = acc[(acc.model == "deit") & (acc.attack == "clean")].iloc[0]
    # p = 0.5, n = 20: centre 0.5, half-width z*sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n)
    half = Z * math.sqrt(0.25 / 20 + Z**2 / 1600) / (1 + Z**2 / 20)
    assert (row.n, row.correct, row.acc) == (20, 10, 0.5)
    assert row.lo == pytest.approx(0.5 - half) and row.lo == pytest.approx(0.2993, abs=1e-4)
    assert row.hi == pytest.approx(0.7007, abs=1e-4)
    full = acc[(acc.model == "deit-grc") & (acc.attack == "clean")].iloc[0]
    assert full.hi == 1.0 and full.lo == pytest.approx(20 / (20 + Z**2), abs=1e-9)  # 0.8389
    assert list(acc[acc.model == "deit"].attack) == ["clean", "pgd", "pgd"]


def test_mcnemar_and_paired_difference_match_hand_values(paired_rows: pd.DataFrame) -> None:
    paired = T.paired_table(paired_rows)
    assert set(paired.baseline) == {"deit"} and set(paired.variant) == {"deit-grc"}
    at = {(r.attack, r.eps): r for r in paired.itertuples()}
    r1 = at[("pgd", 0.01)]
    assert (r1.b, r1.c, r1.n) == (3, 0, 20)
    assert r1.p_value == pytest.approx(0.25)  # 2 * (1/2)^3
    assert r1.diff == pytest.approx(-3 / 20)
    r2 = at[("pgd", 0.02)]
    assert (r2.b, r2.c) == (10, 2)
    assert r2.p_value == pytest.approx(2 * (1 + 12 + 66) / 4096)  # 0.03857...
    assert r2.p_value == pytest.approx(0.0386, abs=1e-4)
    assert r2.acc_baseline == pytest.approx(0.6) and r2.acc_variant == pytest.approx(0.2)
    clean = at[("clean", 0.0)]
    assert (clean.b, clean.c) == (0, 10) and clean.p_value == pytest.approx(2 / 1024)


def test_perplexity_is_recomputed_from_token_sums() -> None:
    rows = pd.DataFrame(
        {
            "model": "lm",
            "example_id": [0, 1, 0, 1],
            "kind": ["clean", "clean", "contamination", "contamination"],
            "attack": ["clean", "clean", "wordswap", "wordswap"],
            "eps": [0.0, 0.0, 0.2, 0.2],
            "norm": "",
            "nll_sum": [10.0, 30.0, 20.0, 40.0],
            "n_tokens": [10, 10, 10, 10],
            "correct_tokens": [5, 5, 2, 2],
            "pert_norm": 0.0,
        }  # fmt: skip
    )
    table = T.perplexity_table(rows)
    clean = table[table.attack == "clean"].iloc[0]
    assert clean.ppl == pytest.approx(math.exp(40 / 20))  # not the mean of per-example perplexities
    assert clean.token_acc == pytest.approx(0.5)
    assert clean.ppl_lo <= clean.ppl <= clean.ppl_hi
    assert table[table.attack == "wordswap"].iloc[0].ppl == pytest.approx(math.exp(3.0))


def test_tables_in_three_formats(tmp_path: Path, paired_rows: pd.DataFrame) -> None:
    run = write_run(tmp_path / "run", "attack", paired_rows, image_config(), "image")
    result = build_report([run], tmp_path / "rep", figures=())
    assert result.figures == {}
    paths = {p.suffix: p for p in result.tables["robust_accuracy"]}
    assert set(paths) == {".md", ".csv", ".tex"}
    tex = paths[".tex"].read_text()
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex and "booktabs" in tex
    assert "50.0 [29.9, 70.1]" in paths[".md"].read_text()
    csv = pd.read_csv(paths[".csv"])
    assert list(csv.columns) == ["model", "attack", "eps", "n", "correct", "acc", "lo", "hi"]
    paired_csv = pd.read_csv(tmp_path / "rep" / "tables" / "paired_vs_baseline.csv")
    assert paired_csv[paired_csv.eps == 0.02].p_value.iloc[0] == pytest.approx(0.03857, abs=1e-5)
    index = (tmp_path / "rep" / "index.md").read_text()
    assert "tables/robust_accuracy.tex" in index and "## Not included" in index
    assert "no Lipschitz run given" in index


def _series(fig) -> list[tuple[int, int, int]]:
    """(lines, collections, images) per visible axes (colour bars excluded)."""
    return [
        (len(ax.lines), len(ax.collections), len(ax.images))
        for ax in fig.axes
        if ax.get_visible() and ax.get_label() != "<colorbar>"
    ]


def test_figures_have_one_series_per_model(tmp_path: Path, paired_rows: pd.DataFrame) -> None:
    acc = T.accuracy_table(paired_rows)
    fig = F.robust_accuracy_figure(acc, ["run-a"])
    assert _series(fig) == [(2, 2, 0)]  # one line and one Wilson band per model
    assert any("run-a" in t.get_text() for t in fig.texts)
    paths = F.save_figure(fig, tmp_path, "acc", ("pdf", "png"))
    assert all(p.stat().st_size > 1000 for p in paths)

    ppl = pd.DataFrame(
        {
            "model": ["lm", "lm", "lm-bsa", "lm-bsa"],
            "kind": ["clean", "contamination"] * 2,
            "attack": ["clean", "wordswap"] * 2,
            "eps": [0.0, 0.1] * 2,
            "ppl": [10.0, 12.0, 10.0, 11.0],
            "ppl_lo": [9.0, 11.0, 9.0, 10.0],
            "ppl_hi": [11.0, 13.0, 11.0, 12.0],
        }  # fmt: skip
    )
    fig = F.perplexity_figure(ppl, ["run-lm"])
    assert _series(fig) == [(2, 2, 0)]

    layers = pd.DataFrame(
        {
            "model": ["deit"] * 3 + ["deit-grc"] * 3,
            "block": [0, 1, 2] * 2,
            "lower_mean": [1.0, 2.0, 3.0] * 2,
            "local_upper_median": [10.0, 20.0, 30.0] * 2,
        }  # fmt: skip
    )
    fig = F.lipschitz_profile_figure(layers, ["run-lip"])
    assert _series(fig) == [(2, 0, 0), (2, 0, 0)]  # one panel each for the gain and the certified bound

    study = pd.DataFrame(
        {
            "n": [8, 16] * 3,
            "kind": ["softmax+pos"] * 2 + ["bsa-gaussian"] * 2 + ["softmax"] * 2,
            "mean_perturbation": [1e-4, 2e-4] * 3,
            "std_perturbation": [1e-5] * 6,
            "noise": 1e-3,
        }  # fmt: skip
    )
    fig = F.seqlen_figure(study, ["run-seq"])
    assert _series(fig) == [(3, 3, 0)]

    maps = [AttentionMaps(m, np.full((4, 7, 7), 1 / 49), f"{m}: untrained") for m in ("deit", "deit-bsa")]
    fig = F.attention_figure(maps, np.zeros((1, 28, 28)), ["weights"])
    images = [s[2] for s in _series(fig)]
    assert len(images) == 2 * 5 and all(i == 1 for i in images)  # input + 4 layers per model
    paths = F.save_figure(fig, tmp_path, "att", ("png",))
    assert paths[0].stat().st_size > 1000


def test_palette_is_fixed_per_variant() -> None:
    pal = Palette()
    assert pal.color("deit-bsa") == pal.color("lm-bsa") != pal.color("deit")
    assert len({pal.color(m) for m in ("deit", "deit-bsa", "deit-grc", "deit-bsa-grc")}) == 4
    assert variant_key("deit-grc [run-2]") == "grc" and pal.color("deit [run-2]") == pal.color("deit")
    assert pal.color("timm:vit_tiny") not in {pal.color(m) for m in ("deit", "deit-bsa", "deit-grc", "deit-bsa-grc")}


def test_full_report_from_engine_runs(tmp_path: Path) -> None:
    """Image attack run (4 variants, real engine), synthetic LM run, Lipschitz run and sequence-length study."""
    from robustbench_filters.api.evaluate import estimate_lipschitz, evaluate

    img = tmp_path / "img"
    evaluate(["deit", "deit-bsa", "deit-grc", "deit-bsa-grc"], ["fgsm", "pgd"], eps=[0.01, 0.05], n_examples=8,
             steps=1, checkpoint="none", out=img)  # fmt: skip
    lm_recs = [
        {"model": m, "example_id": i, "kind": k, "attack": a, "eps": e, "norm": "", "nll_sum": 30.0 + 5 * e + i,
         "n_tokens": 10, "correct_tokens": 3, "pert_norm": 0.0}
        for m in ("lm", "lm-grc") for i in range(6)
        for k, a, e in (("clean", "clean", 0.0), ("contamination", "wordswap", 0.2), ("contamination", "corruption:typo", 2.0))
    ]  # fmt: skip
    lm = write_run(tmp_path / "lm", "attack", pd.DataFrame(lm_recs), {"data": "austen", "n_examples": 6}, "lm")
    lip = tmp_path / "lip"
    estimate_lipschitz(["deit", "deit-grc"], n_examples=1, method="power", per_layer=True, checkpoint=None,
                       out=lip, power_iters=3, batch_size=1)  # fmt: skip
    seq = tmp_path / "seq"
    sequence_length_run(seq, SeqlenConfig(ns=(8, 16), dim=16, heads=2, trials=2))

    result = build_report([img, lm, lip, seq], tmp_path / "rep")
    assert set(result.figures) == {
        "robust_accuracy_vs_eps", "attention_maps", "perplexity_vs_budget", "lipschitz_profile", "perturbation_vs_seqlen"
    }  # fmt: skip
    assert {"robust_accuracy", "paired_vs_baseline", "perplexity", "corruption_lm", "lipschitz_bounds",
            "lipschitz_layers", "seqlen"} <= set(result.tables)  # fmt: skip
    for paths in [*result.tables.values(), *result.figures.values()]:
        assert all(p.exists() and p.stat().st_size > 0 for p in paths)
    paired = pd.read_csv(tmp_path / "rep" / "tables" / "paired_vs_baseline.csv")
    assert set(paired.variant) == {"deit-bsa", "deit-grc", "deit-bsa-grc"} and set(paired.baseline) == {"deit"}
    index = result.index.read_text()
    for name in result.figures:
        assert f"figures/{name}.png" in index
    recorded = json.loads((img / "summary.json").read_text())["attention"]  # maps come from the run, not a model
    assert {"deit", "deit-bsa"} <= set(recorded) and len(recorded["deit"]["maps"]) == 4


def test_refuses_runs_on_different_examples(tmp_path: Path, paired_rows: pd.DataFrame) -> None:
    a = write_run(tmp_path / "a", "attack", paired_rows, image_config("ids-a"), "image")
    b = write_run(tmp_path / "b", "attack", paired_rows, image_config("ids-b"), "image")
    with pytest.raises(RobfiltError, match="different examples") as exc:
        build_report([a, b], tmp_path / "rep")
    assert "\n" not in str(exc.value) and "--allow-mixed" in str(exc.value)
    result = build_report([a, b], tmp_path / "rep", allow_mixed=True, figures=())
    assert any("different examples" in n for n in result.notes)
    paired = pd.read_csv(result.tables["paired_vs_baseline"][1])
    # the same models from run b are renamed and only paired within their own example set
    assert set(zip(paired.variant, paired.baseline, strict=True)) == {
        ("deit-grc", "deit"),
        ("deit-grc [b]", "deit [b]"),
    }
    assert set(paired.n) == {20}


def test_cli_report_and_errors(tmp_path: Path, paired_rows: pd.DataFrame, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_run(tmp_path / "a", "attack", paired_rows, image_config("ids-a"), "image")
    b = write_run(tmp_path / "b", "attack", paired_rows, image_config("ids-b"), "image")
    assert cli_run(["report", str(a), "--out", str(tmp_path / "rep"), "--figures", "png", "--json"]) == 0
    assert "robust_accuracy" in capsys.readouterr().out
    assert (tmp_path / "rep" / "figures" / "robust_accuracy_vs_eps.png").exists()
    assert not (tmp_path / "rep" / "figures" / "robust_accuracy_vs_eps.pdf").exists()

    not_a_run = tmp_path / "plain"
    not_a_run.mkdir()
    cases = [
        ([str(not_a_run)], "not a robfilt run folder"),
        ([str(a), str(b)], "different examples"),
        ([str(a), "--format", "md,docx"], "unknown table format 'docx'"),
    ]
    for args, message in cases:
        assert cli_run(["report", *args, "--out", str(tmp_path / "rep2")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1


def test_corruption_tables_and_clean_rows_counted_once(tmp_path: Path, paired_rows: pd.DataFrame) -> None:
    """Corruption runs (kind 'contamination', eps = severity) next to an attack run on the same examples."""
    n = 20
    corr = image_rows(
        {
            ("deit", "clean", 0.0): flags(n, set(range(10))),
            ("deit-grc", "clean", 0.0): flags(n, set(range(20))),
            ("deit", "corruption:noise", 1.0): flags(n, set(range(10))),  # error 0.5
            ("deit", "corruption:noise", 2.0): flags(n, set(range(10))),  # error 0.5
            ("deit-grc", "corruption:noise", 1.0): flags(n, set(range(15))),  # error 0.25
            ("deit-grc", "corruption:noise", 2.0): flags(n, set(range(15))),  # error 0.25
        }
    )
    corr["kind"] = np.where(corr["attack"] == "clean", "clean", "contamination")
    a = write_run(tmp_path / "attack", "attack", paired_rows, image_config(), "image")
    c = write_run(tmp_path / "corr", "attack", corr, image_config(), "image")
    result = build_report([a, c], tmp_path / "rep", figures=())
    acc = pd.read_csv(result.tables["robust_accuracy"][1])
    assert set(acc[acc.attack == "clean"].n) == {20}  # the clean rows of both runs are one measurement
    table = pd.read_csv(result.tables["corruption_image"][1])
    grc = table[(table.model == "deit-grc") & (table.corruption == "noise") & (table.severity == 2.0)].iloc[0]
    assert grc.acc == pytest.approx(0.75)
    ce = pd.read_csv(result.tables["corruption_error_image"][1])
    row = ce[(ce.model == "deit-grc") & (ce.corruption == "mCE")].iloc[0]
    assert row.ce == pytest.approx((0.25 + 0.25) / (0.5 + 0.5)) and row.baseline == "deit"
    paired = pd.read_csv(result.tables["paired_vs_baseline"][1])
    noise = paired[(paired.attack == "corruption:noise") & (paired.eps == 1.0)].iloc[0]
    assert (noise.b, noise.c) == (0, 5) and noise.p_value == pytest.approx(2 / 32)
