"""Paper mode and the figure/table defects of issue 26: one way to write eps, exact certified curves, legends that
match their markers, captions that name only what is drawn, one-/two-column widths, 300 dpi, and provenance kept
next to figures that no longer carry it."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from figure_checks import PPM_300_DPI, png_pixels_per_metre
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from report_synthetic import CERT_RADII, certify_runs, synthetic_runs
from run_summaries import typed

from robustbench_filters.core.budgets import eps_key, eps_text
from robustbench_filters.core.parsing import parse_number
from robustbench_filters.gating.metrics import same_eps
from robustbench_filters.report import build_report
from robustbench_filters.report import certified as CT
from robustbench_filters.report import figures as F
from robustbench_filters.report import render as R
from robustbench_filters.report.lipschitz_gap import lipschitz_gap_figure
from robustbench_filters.report.provenance import PROVENANCE
from robustbench_filters.report.style import CHROME_IN, ONE_COLUMN, TWO_COLUMN
from robustbench_filters.runs.folder import load_run

ROOT = Path(__file__).resolve().parents[1]
WIDTHS_PT = {round(ONE_COLUMN * 72, 2), round(TWO_COLUMN * 72, 2)}


# -- eps, written one way ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("eps", "text"),
    [
        (0.0, "0"),
        (1 / 255, "1/255"),
        (float(np.float32(8 / 255)), "8/255"),  # through float32: still 8/255
        (0.0313725, "8/255"),  # 8/255 written to 7 digits
        (0.5 / 255, "0.00196"),  # not on the grid: 3 significant digits, never 0.0019607843
        (0.2, "0.2"),  # = 51/255, but nobody means that
        (0.1 * 6, "0.6"),  # 0.6000000000000001 (an axis tick) is 153/255 too, and still 0.6
        (0.25, "0.25"),
        (0.0314, "0.0314"),
        (1.0, "1"),
        (1e-5, "1e-05"),
    ],
)
def test_eps_text(eps: float, text: str) -> None:
    assert eps_text(eps) == text


@pytest.mark.parametrize("eps", [0.5 / 255, 8 / 255, 0.2, 0.0313725, 1e-5])
def test_eps_keys_keep_every_digit(eps: float) -> None:
    assert same_eps(parse_number(eps_key(eps)), eps)  # a condition key parses back to the same budget


def _acc(eps: list[float]) -> pd.DataFrame:
    rows = [{"model": "deit", "attack": "clean", "eps": 0.0, "n": 20, "acc": 0.9, "lo": 0.8, "hi": 0.95}]
    rows += [{"model": "deit", "attack": "pgd", "eps": e, "n": 20, "acc": 0.5, "lo": 0.4, "hi": 0.6} for e in eps]
    return pd.DataFrame(rows)


MIXED = [0.5 / 255, 1 / 255, 2 / 255, 4 / 255]


def test_a_table_writes_eps_like_the_formatter() -> None:
    layout = R.accuracy_layout(_acc(MIXED))
    assert layout["eps"].tolist() == ["-", "0.00196", "1/255", "2/255", "4/255"]


def test_an_axis_writes_eps_like_the_table() -> None:
    ax = F.robust_accuracy_figure(_acc(MIXED), ["r"]).axes[0]
    ticks = list(ax.get_xticks())
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == pytest.approx([0.0, *MIXED])  # at the measured budgets, not at 0.000-0.016
    assert {label for label in labels if label} <= {"0", *R.accuracy_layout(_acc(MIXED))["eps"]}
    assert "4/255" in labels and not any(len(label) > 7 for label in labels)
    assert "k/255" not in ax.get_xlabel()  # 0.00196 is not on the grid; the label says so by not claiming it
    plain = F.robust_accuracy_figure(_acc([0.005, 0.01, 0.05]), ["r"]).axes[0]
    plain.figure.draw_without_rendering()
    shown = [t.get_text() for t in plain.get_xticklabels() if t.get_text()]
    assert shown and all(label == eps_text(float(label)) for label in shown)  # "0.02", not "0.020"
    l2 = F.robust_accuracy_figure(_acc([0.25, 0.5, 1.0]), ["r"]).axes[0]
    l2.figure.draw_without_rendering()
    assert not any("/255" in t.get_text() for t in l2.get_xticklabels())  # a 0.6 tick is not 153/255


def test_terminal_table_writes_eps_like_the_report(capsys) -> None:
    from robustbench_filters.cli._render import render_summary
    from robustbench_filters.summaries import ImageAttackSummary

    cell = {"acc": 0.5, "lo": 0.4, "hi": 0.6, "n": 10, "correct": 5}
    robust = [{"attack": "pgd", "eps": e, **cell} for e in (0.5 / 255, 1 / 255)]
    summary = typed(ImageAttackSummary, {
        "kind": "attack", "family": "image", "data": "synthetic", "n_examples": 10, "seed": 0, "attacks": ["pgd"],
        "eps": [0.5 / 255, 1 / 255], "norm": "linf", "steps": 20, "step_size": None,
        "models": {"deit": {"clean": cell, "robust": robust}}, "checks": [],
        "checks_summary": {"passed": True, "pass": 0, "warn": 0, "fail": 0},
    })  # fmt: skip
    render_summary(summary)
    out = capsys.readouterr().out
    assert "0.00196" in out and "1/255" in out and "0.0019607" not in out and "0.003922" not in out


# -- certified curves, tables, legends and captions ---------------------------------------------------------------
@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return certify_runs(tmp_path_factory.mktemp("cert"))


def _cert_parts(runs: list[Path], smoothadv: bool = True, base: bool = True):
    rows = load_run(runs[0]).rows
    if not smoothadv:
        rows = rows[rows["kind"] != "attack"]
    smoothed = CT.smoothed_attack_table(rows)
    base_t = CT.base_l2_table([load_run(runs[0])], [load_run(runs[1])]) if base else pd.DataFrame()
    return rows, CT.certified_curve(rows), smoothed, base_t


def test_certified_curve_steps_at_the_certified_radii_and_ends_at_the_largest(cert) -> None:
    rows, curve, smoothed, base = _cert_parts(cert)
    deit = curve[curve["model"] == "deit"]
    assert deit["radius"].tolist() == pytest.approx([0.0, *sorted(set(CERT_RADII))])
    assert deit["radius"].iloc[-1] == CT.largest_certified_radius(rows) == pytest.approx(0.283)
    assert deit["acc"].iloc[-1] == pytest.approx(2 / 8)  # two examples certified at 0.283; nothing beyond
    fig = CT.certified_figure(curve, smoothed, base, ["r"], "n = 8")
    steps = [line for line in fig.axes[0].get_lines() if line.get_gid() == "certified"]
    assert len(steps) == 2 and all(line.get_drawstyle() == "steps-pre" for line in steps)
    xs = np.asarray(steps[0].get_xdata(), float)
    assert xs[-1] == pytest.approx(0.283) and xs.tolist() == pytest.approx(deit["radius"].tolist())


def test_columns_beyond_every_certified_radius_are_marked(cert) -> None:
    rows = load_run(cert[0]).rows
    table, largest = CT.certified_table(rows), CT.largest_certified_radius(rows)
    cols = list(CT.certified_layout(table, largest).columns)
    assert cols[2:-1] == ["r = 0", "r = 0.25", "r = 0.5\u2020", "r = 0.75\u2020", "r = 1\u2020"]
    note = CT.beyond_note(table, largest)
    assert "beyond every certified radius" in note and "0.283" in note
    assert CT.beyond_note(CT.certified_table(rows, [0.0, 0.25]), largest) == ""
    assert "\\textdagger{}" in R.latex(CT.certified_layout(table, largest), "c" + note, ["s"])


def _plotted_markers(fig: Figure) -> set[tuple[str, str]]:
    return {
        (str(line.get_marker()), to_hex(line.get_markeredgecolor()))
        for ax in fig.axes
        for line in ax.get_lines()
        if str(line.get_marker()) not in ("None", "none", "")
    }


def assert_legend_matches_markers(fig: Figure) -> None:
    """Every legend key with a marker shows a (marker, colour) pair that is drawn in the panels."""
    plotted = _plotted_markers(fig)
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert legends, "no legend"
    for legend in legends:
        for handle in legend.legend_handles:
            marker = str(getattr(handle, "get_marker", lambda: "None")())
            if marker in ("None", "none", ""):
                continue
            assert (marker, to_hex(handle.get_markeredgecolor())) in plotted, (handle.get_label(), marker)


def test_certified_legend_matches_the_plotted_markers(cert) -> None:
    _, curve, smoothed, base = _cert_parts(cert)
    fig = CT.certified_figure(curve, smoothed, base, ["r"], "n = 8")
    assert_legend_matches_markers(fig)
    keys = {h.get_label(): h for h in fig.legends[0].legend_handles}
    assert keys["deit-grc"].get_marker() == "^"  # the SmoothAdv points of deit-grc are triangles, and so is its key
    points = [line for line in fig.axes[0].get_lines() if line.get_gid() == "smoothadv"]
    assert {p.get_marker() for p in points} == {"o", "^"}


@pytest.mark.parametrize(("smoothadv", "base"), [(True, True), (True, False), (False, False)])
def test_certified_caption_names_only_what_is_drawn(cert, smoothadv: bool, base: bool) -> None:
    _, curve, smoothed, base_t = _cert_parts(cert, smoothadv, base)
    fig = CT.certified_figure(curve, smoothed, base_t, ["r"], "n = 8")
    caption = CT.certified_caption(fig)
    assert ("dashed" in caption) is base and ("L2 PGD" in caption) is base
    assert ("SmoothAdv" in caption) is smoothadv
    labels = {h.get_label() for h in fig.legends[0].legend_handles}
    assert ("base model, L2 PGD" in labels) is base


def test_other_captions_follow_the_figure() -> None:
    seq = pd.DataFrame({"kind": ["softmax"] * 2, "n": [16, 64], "mean_perturbation": [1e-4, 5e-5]})
    assert "sd" not in F.seqlen_caption(F.seqlen_figure(seq, ["r"], "n"))
    assert "1 sd" in F.seqlen_caption(F.seqlen_figure(seq.assign(std_perturbation=1e-6), ["r"], "n"))
    layers = pd.DataFrame([{"model": "deit", "block": b, "lower_mean": 1.0 + b, "local_upper_median": 9.0}
                           for b in range(2)])  # fmt: skip
    caption = F.lipschitz_profile_caption(F.lipschitz_profile_figure(layers, ["r"], "n"))
    assert "LM" not in caption and "vacuous" not in caption


# -- paper mode, end to end ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def paper_report(tmp_path_factory: pytest.TempPathFactory, cert, monkeypatch_module):
    runs = synthetic_runs(tmp_path_factory.mktemp("runs")) + cert
    drawn: dict[str, Figure] = {}
    save = F.save_figure

    def keep(fig, out_dir, stem, formats):
        drawn[stem] = fig
        return save(fig, out_dir, stem, formats)

    monkeypatch_module.setattr(F, "save_figure", keep)
    out = tmp_path_factory.mktemp("paper")
    result = build_report(runs, out, allow_mixed=True, attention=False, html=True, paper=True)
    return result, drawn, runs


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_paper_figures_carry_no_subtitle_and_no_footer(paper_report) -> None:
    result, drawn, _ = paper_report
    assert set(drawn) == set(result.figures) >= {"robust_accuracy_vs_eps", "certified_accuracy_vs_radius"}
    for name, fig in drawn.items():
        assert fig.get_suptitle() == "", name
        assert not [t.get_text() for t in fig.texts], name  # the footer is a figure text
        for ax in fig.axes:
            assert not any("source" in t.get_text() or "@" in t.get_text() for t in ax.texts), name
            assert "@" not in ax.get_title() and "n = " not in ax.get_title()


def test_normal_figures_keep_subtitle_and_footer(cert) -> None:
    _, curve, smoothed, base = _cert_parts(cert)
    fig = CT.certified_figure(curve, smoothed, base, ["certify@0123"], "n = 8 test images")
    assert fig.get_suptitle() == "n = 8 test images" and "certify@0123" in fig.texts[-1].get_text()


def test_provenance_sidecar_names_every_figures_runs_and_hashes(paper_report) -> None:
    result, _, runs = paper_report
    doc = json.loads((result.out / "figures" / PROVENANCE).read_text())["figures"]
    assert set(doc) == set(result.figures)
    manifests = {load_run(r).run_id: load_run(r).manifest for r in runs}
    for name, entry in doc.items():
        assert entry["paper"] is True and entry["setting"].startswith("n ")
        assert sorted(entry["files"]) == sorted(p.name for p in result.figures[name])
        assert entry["runs"], name
        for run in entry["runs"]:
            assert run["rows_sha256"] == manifests[run["id"]]["rows_sha256"]
        assert {r["id"] for r in entry["runs"]} >= {s for s in entry["sources"] if "@" in s}
    cert_runs = {r["id"] for r in doc["certified_accuracy_vs_radius"]["runs"]}
    assert cert_runs == {load_run(r).run_id for r in runs[-2:]}  # the certify run and the base L2 run, no other
    index = (result.out / "index.md").read_text()
    html = (result.out / "index.html").read_text()
    for entry in doc.values():
        assert f"Setting: {entry['setting']}" in index
        assert all(f"`{s}`" in index and s in html for s in entry["sources"])


def test_paper_figures_have_the_declared_column_widths(paper_report) -> None:
    result, drawn, _ = paper_report
    doc = json.loads((result.out / "figures" / PROVENANCE).read_text())["figures"]
    for name, fig in drawn.items():
        assert fig.get_figwidth() in (ONE_COLUMN, TWO_COLUMN) and doc[name]["width_in"] == fig.get_figwidth()
        pdf = next(p for p in result.figures[name] if p.suffix == ".pdf")
        box = re.search(rb"/MediaBox \[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", pdf.read_bytes())
        assert box and float(box.group(1)) == pytest.approx(fig.get_figwidth() * 72), name
        assert round(float(box.group(1)), 2) in WIDTHS_PT


def test_every_png_is_300_dpi(paper_report) -> None:
    result, _, _ = paper_report
    pngs = [p for paths in result.figures.values() for p in paths if p.suffix == ".png"]
    assert pngs and all(png_pixels_per_metre(p) == (PPM_300_DPI, PPM_300_DPI) for p in pngs)


def test_every_legend_in_the_report_matches_its_markers(paper_report) -> None:
    _, drawn, _ = paper_report
    for fig in drawn.values():
        assert_legend_matches_markers(fig)


def test_gap_figure_is_paper_sized_and_its_script_writes_300_dpi(tmp_path: Path) -> None:
    folder = ROOT / "reports" / "lipschitz_gap"
    for name in ("rows.csv", "ablation.csv", "crossover.csv"):
        shutil.copy(folder / name, tmp_path / name)
    rows = pd.read_csv(tmp_path / "rows.csv")
    for paper in (False, True):
        fig = lipschitz_gap_figure(rows, sources=["s"], paper=paper)
        assert fig.get_figwidth() == TWO_COLUMN and (fig.get_suptitle() == "") is paper
        assert_legend_matches_markers(fig)
    spec = importlib.util.spec_from_file_location("lipschitz_gap_script", ROOT / "scripts" / "lipschitz_gap.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    from robustbench_filters.runs.outfolder import OutputFolder

    folder = OutputFolder(tmp_path / "gap", "lipschitz-gap", legacy=script._legacy).open()
    for name in ("rows.csv", "ablation.csv", "crossover.csv"):  # as the script's own run writes them
        shutil.copy(tmp_path / name, folder.path(name))
    script.write_summary(folder, "test")
    assert png_pixels_per_metre(tmp_path / "gap" / "gap.png") == (PPM_300_DPI, PPM_300_DPI)


def test_every_savefig_goes_through_the_one_dpi_constant() -> None:
    """A figure saved anywhere else (a script, a benchmark) would pick its own resolution."""
    calls = []
    for folder in ("robustbench_filters", "cli", "scripts", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            calls += [(path.name, m) for m in re.findall(r"\.savefig\([^\n]*", path.read_text())]
    assert calls and all("dpi=DPI" in call for _, call in calls), calls


def test_cli_report_paper_flag(tmp_path: Path) -> None:
    from report_synthetic import synthetic_seqlen_run

    from robustbench_filters.cli import run

    study = pd.DataFrame({"kind": ["softmax"] * 2, "n": [16, 64], "mean_perturbation": [1e-4, 5e-5], "trials": 2})
    seq = synthetic_seqlen_run(tmp_path / "seq", study)
    for flag, paper in (("--paper", True), (None, False)):
        out = tmp_path / f"rep-{paper}"
        assert run(["report", str(seq), "--out", str(out), "--figures", "pdf", "--format", "md", "-q",
                    *([flag] if flag else [])]) == 0  # fmt: skip
        entry = json.loads((out / "figures" / PROVENANCE).read_text())["figures"]["perturbation_vs_seqlen"]
        assert entry["paper"] is paper and entry["width_in"] == ONE_COLUMN
        assert entry["height_in"] == pytest.approx(2.55 - (CHROME_IN if paper else 0.0))  # one-line footer
