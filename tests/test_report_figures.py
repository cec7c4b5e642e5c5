"""Report figures are print-ready: TrueType fonts, 300 dpi PNGs, log axes from the data, k/255 ticks, n and
threat model stated, a legible source line, one style per variant and a second one per family."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from figure_checks import PPM_300_DPI, assert_print_ready, pdf_font_subtypes, png_pixels_per_metre
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from report_synthetic import DEIT, LMS, synthetic_runs

from robustbench_filters.report import build_report
from robustbench_filters.report import context as C
from robustbench_filters.report import figures as F
from robustbench_filters.report import tables as T
from robustbench_filters.report.attention import AttentionMaps
from robustbench_filters.report.style import OKABE_ITO, Palette, add_footer, new_figure
from robustbench_filters.runs.folder import load_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return synthetic_runs(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def report(runs: list[Path], tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("rep")
    return build_report(runs, out, figures=("pdf", "png", "svg"), allow_mixed=True, attention=False)


def test_the_checks_catch_type3_fonts_and_low_dpi(tmp_path: Path) -> None:
    fig = Figure(figsize=(2, 1))
    fig.subplots().set_title("type 3 text")
    with matplotlib.rc_context({"pdf.fonttype": 3}):
        fig.savefig(tmp_path / "bad.pdf")
    fig.savefig(tmp_path / "bad.png", dpi=100)
    assert "Type3" in pdf_font_subtypes(tmp_path / "bad.pdf")
    assert png_pixels_per_metre(tmp_path / "bad.png") < (PPM_300_DPI, PPM_300_DPI)


def test_every_report_figure_is_print_ready(report) -> None:
    assert set(report.figures) == {
        "robust_accuracy_vs_eps", "perplexity_vs_budget", "lipschitz_profile", "perturbation_vs_seqlen"
    }  # fmt: skip
    assert_print_ready([p for paths in report.figures.values() for p in paths])
    svg = report.figures["lipschitz_profile"][2].read_text()
    assert svg.startswith("<?xml") and "<text" not in svg  # text as paths: the SVG needs no fonts


def test_attention_figure_is_print_ready(tmp_path: Path) -> None:
    maps = [AttentionMaps(m, np.full((2, 7, 7), 1 / 49), f"{m}: untrained") for m in ("deit", "deit-bsa")]
    fig = F.attention_figure(maps, np.zeros((1, 28, 28)), ["weights"])
    assert "n = 1" in fig.get_suptitle()
    assert_print_ready(F.save_figure(fig, tmp_path, "att", ("pdf", "png")))


def _ppl_table(top: float) -> pd.DataFrame:
    rows = []
    for model in ("lm", "lm-bsa"):
        for eps, ppl in ((0.0, 10.0), (0.05, top / 3), (0.1, top)):
            rows.append({"model": model, "kind": "clean" if eps == 0 else "adversarial",
                         "attack": "clean" if eps == 0 else "pgd", "eps": eps, "n": 8, "ppl": ppl,
                         "ppl_lo": ppl * 0.9, "ppl_hi": ppl * 1.1})  # fmt: skip
    return pd.DataFrame(rows)


def test_log_axis_only_where_values_span_decades() -> None:
    wide = F.perplexity_figure(_ppl_table(800.0), ["r"])
    narrow = F.perplexity_figure(_ppl_table(40.0), ["r"])
    assert wide.axes[0].get_yscale() == "log" and "log scale" in wide.axes[0].get_ylabel()
    assert narrow.axes[0].get_yscale() == "linear"


def _acc_table(eps: list[float]) -> pd.DataFrame:
    rows = [{"model": "deit", "attack": "clean", "eps": 0.0, "n": 20, "acc": 0.9, "lo": 0.8, "hi": 0.95}]
    rows += [{"model": "deit", "attack": "pgd", "eps": e, "n": 20, "acc": 0.5, "lo": 0.4, "hi": 0.6} for e in eps]
    return pd.DataFrame(rows)


def test_eps_ticks_read_k_over_255_like_the_tables() -> None:
    fig = F.robust_accuracy_figure(_acc_table([1 / 255, 2 / 255, 8 / 255]), ["r"])
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["0", "1/255", "2/255", "8/255"] and "k/255" in ax.get_xlabel()
    assert [T.eps_label(e) for e in (1 / 255, 8 / 255)] == labels[1::2]  # the tables' own rule
    plain = F.robust_accuracy_figure(_acc_table([0.01, 0.05]), ["r"]).axes[0]
    assert not any("/255" in t.get_text() for t in plain.get_xticklabels()) and "k/255" not in plain.get_xlabel()


def test_every_figure_states_n_and_the_threat_model(runs: list[Path]) -> None:
    image = [load_run(runs[0])]
    rows = image[0].rows
    subtitle = C.image_subtitle(image, rows, 24)
    assert "n = 24" in subtitle and "L\u221e" in subtitle and "PGD-10" in subtitle and "[0, 1]" in subtitle
    lm = load_run(runs[2])
    lm_sub = C.lm_subtitle([lm], lm.rows, 10)
    assert "n = 10" in lm_sub and "L2" in lm_sub and "mean embedding norm" in lm_sub and "'AAA'" in lm_sub
    lip = C.lipschitz_subtitle(pd.concat([load_run(runs[3]).rows, load_run(runs[4]).rows]))
    assert "3 images per model" in lip and "2 text windows per model" in lip
    # without a subtitle from the builder a figure still states n
    acc = T.accuracy_table(rows)
    assert F.robust_accuracy_figure(acc, ["r"]).get_suptitle().startswith("n = 24")
    seq = T.seqlen_table(load_run(runs[5]).rows)
    assert "n = 4 trials" in F.seqlen_figure(seq, ["r"]).get_suptitle()


def test_source_line_is_legible_and_wraps() -> None:
    fig = new_figure(3.3, 2.0)
    sources = [f"vision-attack@{i:016x}" for i in range(8)]
    add_footer(fig, sources)
    text = fig.texts[-1]
    assert text.get_fontsize() >= 5.5 and text.get_text().count("\n") >= 2
    assert all(s in text.get_text().replace("\n", " ") for s in sources)
    assert fig.get_figheight() > 2.0  # grew for the extra lines instead of squeezing the plot


def test_one_style_per_variant_in_both_families() -> None:
    pal = Palette()
    for deit, lm in zip(DEIT, LMS, strict=True):
        assert pal.color(deit) == pal.color(lm) and pal.marker(deit) == pal.marker(lm)
        d, m = pal.line(deit), pal.line(lm)
        assert d["linestyle"] != m["linestyle"] and d["markerfacecolor"] != m["markerfacecolor"]
    assert len({pal.color(m) for m in DEIT}) == 4 and len({pal.marker(m) for m in DEIT}) == 4
    assert {pal.color(m).upper() for m in DEIT} <= {c.upper() for c in OKABE_ITO.values()}
    assert pal.color("deit-bsa [run-2]") == pal.color("deit-bsa")


def test_lipschitz_profile_tells_deit_and_lm_apart() -> None:
    layers = pd.DataFrame(
        [{"model": m, "block": b, "lower_mean": 10.0 ** (2 - b), "local_upper_median": 1e8 * (b + 1)}
         for m in ("deit-bsa", "lm-bsa") for b in range(3)]
    )  # fmt: skip
    fig = F.lipschitz_profile_figure(layers, ["r"])
    for ax in fig.axes:
        deit, lm = ax.lines
        assert to_hex(deit.get_color()) == to_hex(lm.get_color()) and deit.get_marker() == lm.get_marker()
        assert deit.get_linestyle() != lm.get_linestyle()
        assert to_hex(deit.get_markerfacecolor()) != to_hex(lm.get_markerfacecolor())
    assert [ax.get_yscale() for ax in fig.axes] == ["log", "linear"]  # gains span 100x, bounds only 3x
