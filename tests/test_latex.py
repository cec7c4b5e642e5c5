"""LaTeX tables: complete floats (caption, label, booktabs), numbers in math mode, everything escaped.

The default run parses every table a report writes; ``-m slow`` also compiles each with pdflatex.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from report_synthetic import synthetic_runs

from robustbench_filters.report import build_report
from robustbench_filters.report.latex import caption_text, cell, escape, latex_table

_MATH = re.compile(r"(?<!\\)\$(.*?)(?<!\\)\$")
ENV = re.compile(r"\\(begin|end)\{(\w+\*?)\}")


def _outside_math(line: str) -> str:
    return _MATH.sub(" ", line)


def check_table(tex: str) -> list[str]:
    """Everything wrong with one generated table (empty: fine)."""
    problems = []
    lines = [ln for ln in tex.splitlines() if not ln.startswith("%")]
    body = "\n".join(lines)
    stack: list[str] = []
    for kind, env in ENV.findall(body):
        if kind == "begin":
            stack.append(env)
        elif not stack or stack.pop() != env:
            problems.append(f"\\end{{{env}}} without its \\begin")
    if stack:
        problems.append(f"unclosed environments {stack}")
    if ENV.findall(body)[:2] != [("begin", "table"), ("begin", "tabular")]:
        problems.append("not a table float around a tabular")
    if len(re.findall(r"\\caption\{.+\}", body)) != 1:
        problems.append("needs exactly one non-empty \\caption")
    if len(re.findall(r"\\label\{tab:[\w:.-]+\}", body)) != 1:
        problems.append("needs exactly one \\label{tab:...}")
    rules = [r for r in re.findall(r"\\(toprule|midrule|bottomrule)", body)]
    if rules != ["toprule", "midrule", "bottomrule"]:
        problems.append(f"booktabs rules out of order: {rules}")
    if body.count("\\hline"):
        problems.append("\\hline instead of booktabs rules")
    spec = re.search(r"\\begin\{tabular\}\{([lrc]+)\}", body)
    start, end = body.find("\\toprule"), body.find("\\bottomrule")
    rows = [r for r in body[start:end].split("\n")[1:] if r.strip() and not r.startswith("\\midrule")]
    for row in rows:
        cells = len(re.split(r"(?<!\\)&", row))
        if not spec or cells != len(spec.group(1)) or not row.rstrip().endswith("\\\\"):
            problems.append(f"row does not match the column spec: {row[:60]}")
    for ln in lines:
        if len(re.findall(r"(?<!\\)\$", ln)) % 2:
            problems.append(f"unbalanced math: {ln[:60]}")
        if re.search(r"\d[eE][+-]?\d", ln):
            problems.append(f"raw e-notation: {ln[:60]}")
        text = _outside_math(ln)
        if re.search(r"[<>]", text):
            problems.append(f"< or > in text mode: {ln[:60]}")
        if re.search(r"(?<![\w\\])-\d", text):
            problems.append(f"hyphen as a minus sign: {ln[:60]}")
        if re.search(r"(?<!\\)[_%#&^~]", text.replace("&", "")) or re.search(r"(?<!\\)[_%#^]", text):
            problems.append(f"unescaped special character: {ln[:60]}")
        if text.replace("\\{", "").replace("\\}", "").count("{") != text.replace("\\{", "").replace("\\}", "").count(
            "}"
        ):
            problems.append(f"unbalanced braces: {ln[:60]}")
    return problems


@pytest.fixture(scope="module")
def tex_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("latex")
    result = build_report(synthetic_runs(root / "runs"), root / "rep", formats=("tex",), figures=(),
                          allow_mixed=True, attention=False)  # fmt: skip
    files = [p for paths in result.tables.values() for p in paths]
    assert len(files) == 8
    return files


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("85.2 [81.0, 88.7]", "$85.2$ [$81.0$, $88.7$]"),
        ("-4.2", "$-4.2$"),
        ("+4.2", "$+4.2$"),
        ("<0.001", "$<0.001$"),
        ("3.93e+41", r"$3.93 \times 10^{41}$"),
        ("2.00e-05", r"$2.00 \times 10^{-5}$"),
        (3.93e41, r"$3.93 \times 10^{41}$"),
        (-0.25, "$-0.25$"),
        (1000.0, "$1000$"),
        ("x1.023", r"$\times 1.023$"),
        ("8/255", "$8/255$"),
        ("-", "--"),
        (float("nan"), "--"),
        ("deit-bsa-grc", "deit-bsa-grc"),
        ("blocks.0", "blocks.0"),
        ("gaussian_noise & 50% #1", r"gaussian\_noise \& $50$\% \#1"),
    ],
)
def test_cells(value: object, expected: str) -> None:
    assert cell(value) == expected


def test_text_and_captions_are_escaped() -> None:
    assert escape("a_b {c} ~^\\ <x> |") == (
        r"a\_b \{c\} \textasciitilde{}\textasciicircum{}\textbackslash{} \textless{}x\textgreater{} \textbar{}"
    )
    assert escape("\u03b5 \u00d7 \u221e") == r"$\varepsilon$ $\times$ $\infty$"
    assert caption_text("mean +- 1 sd; eps in [0, 1]; 95% CI") == (
        r"mean $\pm$ $1$ sd; $\varepsilon$ in [$0$, $1$]; $95$\% CI"
    )


def test_every_generated_table_is_a_complete_escaped_float(tex_files: list[Path]) -> None:
    labels = []
    for path in tex_files:
        tex = path.read_text()
        assert check_table(tex) == [], (path.name, check_table(tex))
        assert "needs \\usepackage{booktabs}" in tex and "% source: " in tex
        labels += re.findall(r"\\label\{(.+?)\}", tex)
        header = tex.split("\\toprule\n", 1)[1].split("\n", 1)[0]
        assert "\\_" not in header, f"{path.name}: snake_case column header {header}"
    assert len(labels) == len(set(labels)) == len(tex_files)
    bounds = next(p for p in tex_files if p.stem == "lipschitz_bounds").read_text()
    assert r"$3.93 \times 10^{41}$" in bounds and "lm-bsa\\_v2" in bounds
    paired = next(p for p in tex_files if p.stem == "paired_vs_baseline").read_text()
    assert "$<0.001$" in paired or "$-" in paired


def test_the_checker_rejects_the_old_output() -> None:
    table = pd.DataFrame({"model": ["deit"], "p": ["<0.001"], "bound": ["3.93e+41"]})
    good = latex_table(table, "A caption", "tab:x", ["run"])
    assert check_table(good) == []
    old = "\\begin{tabular}{lrr}\n\\toprule\nmodel & p & bound \\\\\n\\midrule\ndeit & <0.001 & 3.93e+41 \\\\\n"
    old += "\\bottomrule\n\\end{tabular}\n"
    problems = " ".join(check_table(old))
    for what in ("table float", "caption", "label", "raw e-notation", "text mode"):
        assert what in problems
    assert "hyphen" in " ".join(check_table(good.replace("$-", "-").replace("deit", "-3 deit")))
    assert "special character" in " ".join(check_table(good.replace("A caption", "low_mean")))


@pytest.mark.slow
def test_every_generated_table_compiles_with_pdflatex(tex_files: list[Path], tmp_path: Path) -> None:
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex not found; install Debian's texlive-latex-recommended to compile the tables")
    for path in tex_files:
        doc = tmp_path / f"{path.stem}-doc.tex"
        doc.write_text(
            "\\documentclass{article}\n\\usepackage{booktabs}\n\\usepackage[margin=0.5in,landscape]{geometry}\n"
            f"\\begin{{document}}\n\\input{{{path}}}\n\\end{{document}}\n"
        )
        proc = subprocess.run(
            ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        log = (tmp_path / f"{doc.stem}.log").read_text(errors="replace")
        assert proc.returncode == 0, f"{path.name} does not compile:\n{proc.stdout[-2000:]}"
        assert "Missing character" not in log and "Undefined control sequence" not in log
        if shutil.which("pdftotext"):
            text = subprocess.run(["pdftotext", f"{doc.stem}.pdf", "-"], cwd=tmp_path, capture_output=True,
                                  text=True, check=True).stdout  # fmt: skip
            assert "\u00a1" not in text and "\u00bf" not in text, f"{path.name}: < or > printed as ¡ / ¿"
            assert "Table 1:" in text
