"""One visual language for every table and figure: fixed colours per variant, paper-sized figures, footers.

A variant keeps its colour in every figure of every report (readers compare figures across pages), so colours
are a fixed table, not a cycle. They come from the Okabe-Ito palette, which stays distinct for the common
colour-vision deficiencies; markers and line styles differ too, so figures also survive grey-scale printing.
The LM variants share the DeiT variants' colours: ``lm-bsa`` looks like ``deit-bsa``.

Figures are built with matplotlib's object API on a bare :class:`~matplotlib.figure.Figure`: no pyplot, so no
global state, and saving renders through Agg (PNG) or the PDF backend without touching the user's display
backend. They are sized for a one-column (3.3 in) or two-column (6.9 in) paper layout.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import matplotlib
from matplotlib.figure import Figure

# Okabe & Ito (2008), "Color Universal Design".
OKABE_ITO: dict[str, str] = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
}
VARIANT_COLORS: dict[str, str] = {
    "": OKABE_ITO["blue"],  # softmax attention, plain residual (the baseline)
    "bsa": OKABE_ITO["orange"],
    "grc": OKABE_ITO["green"],
    "bsa-grc": OKABE_ITO["purple"],
}
VARIANT_MARKERS: dict[str, str] = {"": "o", "bsa": "s", "grc": "^", "bsa-grc": "D"}
VARIANT_LINESTYLES: dict[str, str] = {"": "-", "bsa": "--", "grc": "-.", "bsa-grc": ":"}
# Models outside the registry (timm:<arch>, custom factories) get the remaining colours, in order of appearance.
EXTRA_COLORS: tuple[str, ...] = (OKABE_ITO["sky"], OKABE_ITO["vermillion"], OKABE_ITO["black"], OKABE_ITO["yellow"])
# Sequence-length study kinds: softmax with additive positions is the stock DeiT layer, BSA the bilateral one.
SEQLEN_STYLE: dict[str, dict[str, Any]] = {
    "softmax+pos": {"color": VARIANT_COLORS[""], "marker": "o", "linestyle": "-"},
    "bsa-gaussian": {"color": VARIANT_COLORS["bsa"], "marker": "s", "linestyle": "--"},
    "softmax": {"color": "0.45", "marker": "x", "linestyle": ":"},
}

ONE_COLUMN = 3.3  # inches, e.g. NeurIPS/ICML single column
TWO_COLUMN = 6.9  # inches, full text width
FOOTER_IN = 0.16  # inches reserved at the bottom for the provenance footer
RC: dict[str, Any] = {
    "font.size": 7,
    "axes.titlesize": 7,
    "axes.labelsize": 7,
    "legend.fontsize": 6,
    "xtick.labelsize": 6,
    "ytick.labelsize": 6,
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.1,
    "lines.markersize": 3,
    "grid.linewidth": 0.4,
    "grid.alpha": 0.4,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "pdf.fonttype": 42,  # embed TrueType: editable text in vector editors, accepted by paper systems
    "ps.fonttype": 42,
    "savefig.dpi": 300,
}


def variant_key(model: str) -> str:
    """'deit-bsa-grc' -> 'bsa-grc', 'lm' -> '', 'deit [run]' -> '', 'timm:x' -> 'timm:x' (not a variant)."""
    model = model.split(" [", 1)[0]  # a model renamed after its run (mixed example sets) keeps its colour
    family, _, rest = model.partition("-")
    if family in ("deit", "lm") and rest in VARIANT_COLORS:
        return rest
    return model


class Palette:
    """Colour, marker and line style per model; registry variants are fixed, others are assigned in order."""

    def __init__(self) -> None:
        self._extra: dict[str, int] = {}

    def _key(self, model: str) -> str:
        key = variant_key(model)
        if key not in VARIANT_COLORS and key not in self._extra:
            self._extra[key] = len(self._extra)
        return key

    def color(self, model: str) -> str:
        key = self._key(model)
        return VARIANT_COLORS.get(key) or EXTRA_COLORS[self._extra[key] % len(EXTRA_COLORS)]

    def marker(self, model: str) -> str:
        key = self._key(model)
        return VARIANT_MARKERS.get(key, "v")

    def linestyle(self, model: str) -> str:
        key = self._key(model)
        return VARIANT_LINESTYLES.get(key, (0, (1, 1)))  # type: ignore[return-value]

    def line(self, model: str) -> dict[str, Any]:
        return {"color": self.color(model), "marker": self.marker(model), "linestyle": self.linestyle(model)}


@contextlib.contextmanager
def paper_style() -> Iterator[None]:
    """Small fonts and thin lines that match 8-10 pt paper text at the sizes below."""
    with matplotlib.rc_context(RC):
        yield


def new_figure(width: float, height: float, footer: bool = True) -> Figure:
    """A bare Figure with constrained layout; the bottom strip stays free for :func:`add_footer`."""
    fig = Figure(figsize=(width, height), layout="constrained")
    if footer:
        fig.get_layout_engine().set(rect=(0.0, FOOTER_IN / height, 1.0, 1.0 - FOOTER_IN / height))
    return fig


def add_footer(fig: Figure, sources: Sequence[str]) -> None:
    """Write where the figure's numbers came from (run ids, weights) in a small grey line at the bottom."""
    text = "source: " + "; ".join(sources) if sources else "source: -"
    fig.text(0.005, 0.004, text, fontsize=4.5, color="0.45", ha="left", va="bottom")


def grid_shape(n: int, max_cols: int = 4) -> tuple[int, int]:
    cols = min(n, max_cols)
    return math.ceil(n / cols), cols
