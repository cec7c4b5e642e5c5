"""LaTeX tables a paper can ``\\input`` as they are: a ``table`` float with caption, label and booktabs rules.

Cells arrive as the Markdown layout's text ("85.2 [81.0, 88.7]", "+3.5", "<0.001", "3.93e+41", "x1.023",
"8/255", "-") and leave as LaTeX: every number in math mode (so a minus is a true minus, not a hyphen),
e-notation as ``$3.93 \\times 10^{41}$``, comparison signs inside math (in text mode the default OT1 encoding
prints ``<`` as an inverted exclamation mark), a missing value as an en dash, and everything else escaped.
Needs ``\\usepackage{booktabs}`` in the preamble; nothing else.
"""

from __future__ import annotations

import math
import numbers
import re
import unicodedata
from collections.abc import Sequence

import numpy as np
import pandas as pd

# Text-mode escapes for LaTeX's special characters (backslash first is handled by the single-pass regex).
_SPECIAL: dict[str, str] = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
}
_UNICODE: dict[str, str] = {
    "\u03b5": r"$\varepsilon$",
    "\u00d7": r"$\times$",
    "\u221e": r"$\infty$",
    "\u00b1": r"$\pm$",
    "\u00b7": r"$\cdot$",
    "\u2212": r"$-$",
    "\u2014": "---",
    "\u2013": "--",
    "\u2264": r"$\leq$",
    "\u2018": "`",
    "\u2019": "'",
    "\u2265": r"$\geq$",
    "\u2020": r"\textdagger{}",  # a column beyond every certified radius
}
_SPECIAL_RE = re.compile("|".join(re.escape(c) for c in _SPECIAL))
# A number standing on its own: after the start, a space, a bracket, a separator or '=' / '@'. Optional '<'/'>'
# and a ratio 'x' before it, optional sign, e-notation exponent and '/k' denominator (k/255 budgets).
_NUMBER = re.compile(
    r"(?:^|(?<=[\s(\[,;:=@]))"
    r"(?P<rel>[<>]=?\s*)?(?P<x>x(?=[\d.]))?(?P<sign>[+\-\u2212])?"
    r"(?P<mant>\d+(?:\.\d*)?|\.\d+)(?:[eE](?P<exp>[+\-]?\d+))?(?P<frac>/\d+)?"
)
_EPS_WORD = re.compile(r"\beps\b")
MISSING = "--"  # an en dash for "not measured"

# Column headers that read better typeset than spelled out.
HEADERS: dict[str, str] = {
    "eps": r"$\varepsilon$",
    "eps / rate": r"$\varepsilon$ / rate",
    "n": r"$n$",
    "b": r"$b$",
    "c": r"$c$",
    "N": r"$N$",
}


def escape(text: str) -> str:
    """Plain text for LaTeX text mode: special characters escaped, known Unicode symbols typeset."""
    out = []
    for ch in str(text):
        if ch in _SPECIAL:
            out.append(_SPECIAL[ch])
        elif ch in _UNICODE:
            out.append(_UNICODE[ch])
        elif ord(ch) < 128:
            out.append(ch)
        else:  # pdflatex stops on Unicode it has no glyph mapping for; fall back to the ASCII base letter
            out.append(unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode() or "?")
    return "".join(out)


def math_number(match: re.Match[str]) -> str:
    """One matched number as inline math: true minus, ``a \\times 10^{k}``, relations and ratios inside."""
    parts = []
    if match["rel"]:
        rel = match["rel"].strip()
        parts.append({"<": "<", ">": ">", "<=": r"\leq ", ">=": r"\geq "}[rel])
    if match["x"]:
        parts.append(r"\times ")
    if match["sign"]:
        parts.append("+" if match["sign"] == "+" else "-")
    parts.append(match["mant"])
    if match["exp"] is not None and int(match["exp"]) != 0:
        parts.append(rf" \times 10^{{{int(match['exp'])}}}")
    if match["frac"]:
        parts.append(match["frac"])
    return "$" + "".join(parts) + "$"


def text_with_math(text: str) -> str:
    """Escape ``text`` and put each free-standing number into math mode (see the module docstring)."""
    out, pos = [], 0
    for m in _NUMBER.finditer(text):
        out.append(escape(text[pos : m.start()]))
        out.append(math_number(m))
        pos = m.end()
    out.append(escape(text[pos:]))
    return "".join(out)


def format_number(value: float) -> str:
    """3 significant digits; e-notation only outside [1e-3, 1e4) (1000 prints as 1000, not 1e+03)."""
    if not math.isfinite(value):
        return "-"
    if value == 0 or 1e-3 <= abs(value) < 1e4:
        text = f"{value:.3g}"
        return f"{value:.0f}" if "e" in text else text
    return f"{value:.2e}"


def cell(value: object) -> str:
    """A layout cell (number or formatted text) as LaTeX."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, bool | np.bool_):
        return escape(str(bool(value)))
    if isinstance(value, numbers.Integral):
        return text_with_math(str(int(value)))
    if isinstance(value, numbers.Real):
        text = format_number(float(value))
        return MISSING if text == "-" else text_with_math(text)
    text = str(value).strip()
    if text in ("", "-", "nan"):
        return MISSING
    return text_with_math(text)


def caption_text(text: str) -> str:
    """A caption: the word 'eps' typeset as epsilon, '+-' as plus-minus, numbers in math mode."""
    text = re.sub(r"'([^'\n]+)'", "\u2018\\1\u2019", text.replace("+-", "\u00b1"))
    pieces = _EPS_WORD.split(text)
    return r"$\varepsilon$".join(text_with_math(p) for p in pieces)


def header(name: object) -> str:
    return HEADERS.get(str(name), escape(str(name)))


def _numeric_column(values: pd.Series) -> bool:
    def numeric(v: object) -> bool:
        s = str(v).strip()
        return s in ("-", "", "nan") or bool(re.match(r"^[<>x+\-\u2212]*\d|^\.\d", s))

    return all(numeric(v) for v in values)


def label_for(stem: str) -> str:
    """``tab:<stem>`` with only characters that are safe in a label."""
    return "tab:" + re.sub(r"[^A-Za-z0-9:.-]+", "-", stem).strip("-")


def latex_table(table: pd.DataFrame, caption: str, label: str, sources: Sequence[str] = ()) -> str:
    """A complete ``table`` float: caption and label above a booktabs ``tabular``; text left, numbers right."""
    cols = list(table.columns)
    spec = "".join("r" if i > 0 and _numeric_column(table[c]) else "l" for i, c in enumerate(cols)) or "l"
    lines = [
        "% Generated by robfilt report; needs \\usepackage{booktabs}.",
        *(f"% source: {s}" for s in (" ".join(str(x).split()) for x in sources) if s),
        r"\begin{table}[tbp]",
        r"\centering",
        r"\small",
        rf"\caption{{{caption_text(caption)}}}",
        rf"\label{{{label}}}",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(header(c) for c in cols) + r" \\",
        r"\midrule",
    ]
    if table.empty:
        lines.append(rf"\multicolumn{{{max(1, len(cols))}}}{{c}}{{(no rows)}} \\")
    for row in table.itertuples(index=False):
        lines.append(" & ".join(cell(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"
