"""One visual language for every table and figure: fixed styles per variant and family, paper sizes, footers.

A variant keeps its colour and marker in every figure of every report (readers compare figures across pages),
so both are fixed tables, not cycles. Colours come from the Okabe-Ito palette, which stays distinct for the
common colour-vision deficiencies; markers differ too, so figures survive grey-scale printing. The family is a
second, independent channel: DeiT curves are solid with filled markers, LM curves dashed with hollow markers,
so ``deit-bsa`` and ``lm-bsa`` share colour and marker (same variant) and still differ in one figure.

Figures are built with matplotlib's object API on a bare :class:`~matplotlib.figure.Figure`: no pyplot, so no
global state, and saving renders through Agg (PNG) or the PDF backend without touching the user's display
backend. They are sized for a one-column (3.3 in) or two-column (6.9 in) paper layout. :data:`RC` must be
active while *saving* too (:func:`paper_style`): ``pdf.fonttype`` and ``savefig.dpi`` are read at save time.

Two modes: by default a figure states its setting (n, threat model) above the panels and its sources (run ids)
below them, so a PNG shown alone still says what it is. In *paper* mode (``paper=True``) both lines are left
out, since a paper's caption says them, and the figure keeps only the plot at its column width; the builder
writes the setting and sources next to it instead (``index.md``, ``index.html``, ``figures/provenance.json``).
"""

from __future__ import annotations

import contextlib
import math
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.ticker import LogFormatter

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
VARIANTS: tuple[str, ...] = ("", "bsa", "grc", "bsa-grc")  # "" is the baseline (softmax, plain residual)
VARIANT_COLORS: dict[str, str] = {
    "": OKABE_ITO["blue"],
    "bsa": OKABE_ITO["orange"],
    "grc": OKABE_ITO["green"],
    "bsa-grc": OKABE_ITO["purple"],
}
VARIANT_MARKERS: dict[str, str] = {"": "o", "bsa": "s", "grc": "^", "bsa-grc": "D"}
# family -> (line style, filled markers); models outside both families draw like DeiT
FAMILY_STYLE: dict[str, tuple[Any, bool]] = {"deit": ("-", True), "lm": ((0, (4, 1.5)), False)}
# Models outside the registry (timm:<arch>, custom factories) get the remaining colours, in order of appearance.
EXTRA_COLORS: tuple[str, ...] = (OKABE_ITO["sky"], OKABE_ITO["vermillion"], OKABE_ITO["black"], OKABE_ITO["yellow"])
EXTRA_MARKERS: tuple[str, ...] = ("v", "P", "X", "<")
# Sequence-length study kinds: softmax with additive positions is the stock DeiT layer, BSA the bilateral one.
SEQLEN_STYLE: dict[str, dict[str, Any]] = {
    "softmax+pos": {"color": VARIANT_COLORS[""], "marker": "o", "linestyle": "-"},
    "bsa-gaussian": {"color": VARIANT_COLORS["bsa"], "marker": "s", "linestyle": "--"},
    "softmax": {"color": "0.45", "marker": "x", "linestyle": ":"},
}

ONE_COLUMN = 3.3  # inches, e.g. NeurIPS/ICML single column
TWO_COLUMN = 6.9  # inches, full text width
DPI = 300  # every raster figure robfilt writes; print needs >= 300
FOOTER_PT = 5.5  # source line: small, but legible when printed
FOOTER_LINE_IN = FOOTER_PT * 1.3 / 72  # one footer line, in inches
CHROME_IN = 0.3  # what a one-line subtitle and the footer take; a paper figure is this much shorter
MIN_PT = 6.0  # the smallest text in a figure: 6 pt is the usual floor for print
LOG_RATIO = 30.0  # a positive series whose max/min exceeds this is drawn on a log axis
RC: dict[str, Any] = {
    "font.size": 7,
    "axes.titlesize": 7,
    "axes.labelsize": 7,
    "figure.titlesize": 6.5,
    "legend.fontsize": MIN_PT,
    "xtick.labelsize": MIN_PT,
    "ytick.labelsize": MIN_PT,
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.1,
    "lines.markersize": 3.2,
    "grid.linewidth": 0.4,
    "grid.alpha": 0.4,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "pdf.fonttype": 42,  # TrueType, not Type 3: editable text, accepted by paper submission systems
    "ps.fonttype": 42,
    "svg.fonttype": "path",  # self-contained SVG (no font needed where it is shown)
    "savefig.dpi": DPI,
    "figure.dpi": 100,
}


def variant_key(model: str) -> str:
    """'deit-bsa-grc' -> 'bsa-grc', 'lm' -> '', 'deit [run]' -> '', 'timm:x' -> 'timm:x' (not a variant)."""
    model = model.split(" [", 1)[0]  # a model renamed after its run (mixed example sets) keeps its colour
    family, _, rest = model.partition("-")
    if family in FAMILY_STYLE and rest in VARIANT_COLORS:
        return rest
    return model


def family_key(model: str) -> str:
    """'lm-grc' -> 'lm', 'hf:gpt2' -> 'lm', 'deit [run]' -> 'deit'; anything else (timm:x, custom) -> 'deit'."""
    name = model.split(" [", 1)[0]
    if name.startswith("hf:") or "=hf:" in name:  # Hugging Face causal LMs are language models
        return "lm"
    family = name.partition("-")[0]
    return family if family in FAMILY_STYLE else "deit"


class Palette:
    """Colour and marker per variant, line style and marker fill per family; unknown models in order seen."""

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
        return VARIANT_MARKERS.get(key) or EXTRA_MARKERS[self._extra[key] % len(EXTRA_MARKERS)]

    def linestyle(self, model: str) -> Any:
        return FAMILY_STYLE[family_key(model)][0]

    def filled(self, model: str) -> bool:
        return FAMILY_STYLE[family_key(model)][1]

    def line(self, model: str) -> dict[str, Any]:
        """Keyword arguments for ``Axes.plot``: the variant's colour and marker, the family's line and fill."""
        color = self.color(model)
        return {
            "color": color,
            "marker": self.marker(model),
            "linestyle": self.linestyle(model),
            "markerfacecolor": color if self.filled(model) else "white",
            "markeredgecolor": color,
        }


@contextlib.contextmanager
def paper_style() -> Iterator[None]:
    """Small fonts and thin lines that match 8-10 pt paper text, TrueType fonts and 300 dpi when saving."""
    with matplotlib.rc_context(RC):
        yield


def new_figure(width: float, height: float, footer: bool = True, *, paper: bool = False) -> Figure:
    """A bare Figure with constrained layout; the bottom strip stays free for :func:`add_footer`.

    ``height`` is the figure's height with its subtitle and footer; a paper figure (``paper=True``) has neither,
    so it is :data:`CHROME_IN` shorter and reserves no strip.
    """
    if width not in (ONE_COLUMN, TWO_COLUMN):
        raise ValueError(f"figure width {width} in is neither one column ({ONE_COLUMN}) nor two ({TWO_COLUMN})")
    fig = Figure(figsize=(width, height - CHROME_IN if paper else height), layout="constrained")
    if footer and not paper:
        _reserve_footer(fig, 1)
    return fig


def label_figure(fig: Figure, subtitle: str, sources: Sequence[str], *, paper: bool = False) -> None:
    """The setting line above the panels and the source line below, unless the figure is for a paper."""
    if paper:
        return
    add_subtitle(fig, subtitle)
    add_footer(fig, sources)


def _reserve_footer(fig: Figure, lines: int) -> None:
    height = fig.get_figheight()
    strip = (lines * FOOTER_LINE_IN + 0.05) / height
    fig.get_layout_engine().set(rect=(0.0, strip, 1.0, 1.0 - strip))


def add_footer(fig: Figure, sources: Sequence[str]) -> None:
    """Write where the figure's numbers came from (run ids, weights) at the bottom, wrapped to the width.

    Long source lists wrap onto more lines; the figure grows by those lines so the plot keeps its size.
    """
    text = "source: " + "; ".join(sources) if sources else "source: -"
    lines = _wrap(text, fig, FOOTER_PT).split("\n")
    if len(lines) > 1:
        fig.set_figheight(fig.get_figheight() + (len(lines) - 1) * FOOTER_LINE_IN)
    _reserve_footer(fig, len(lines))
    fig.text(0.005, 0.004, "\n".join(lines), fontsize=FOOTER_PT, color="0.3", ha="left", va="bottom",
             linespacing=1.15)  # fmt: skip


def legend_below(fig: Figure, handles: Sequence[Any] | None = None, ncol: int | None = None, **kwargs: Any) -> Legend:
    """A figure legend under the panels, off the data and above the footer: the panels give up its exact height.

    ``handles``: default, every labelled artist of the figure's axes, once per label. ``ncol``: default, the
    most columns whose rendered width fits the figure. Call after :func:`label_figure` (the footer may grow the
    figure): matplotlib's own "outside" legends sit at the figure's edge, on top of a footer, hence measuring.
    """
    if handles is None:
        seen: dict[str, Any] = {}
        for ax in fig.axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                seen.setdefault(label, handle)
        handles = list(seen.values())
    engine = fig.get_layout_engine()
    x0, y0, w, h = engine.get()["rect"]
    renderer = FigureCanvasAgg(fig).get_renderer()
    for n in [ncol] if ncol else range(max(1, len(handles)), 0, -1):
        legend = fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, y0), ncol=n, frameon=False,
                            borderaxespad=0.2, **kwargs)  # fmt: skip
        if ncol or n == 1 or legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            break
        legend.remove()
    lift = legend.get_window_extent(renderer).height / fig.dpi / fig.get_figheight()
    engine.set(rect=(x0, y0 + lift, w, h - lift))
    return legend


def _wrap(text: str, fig: Figure, size_pt: float) -> str:
    chars = max(30, int(fig.get_figwidth() * 72 / (size_pt * 0.55)))  # ~0.55 em per character
    return "\n".join(textwrap.wrap(text, chars, break_on_hyphens=False)) or text


def add_subtitle(fig: Figure, text: str) -> None:
    """The figure's sample size and threat model above the panels (every figure states both), wrapped."""
    size = RC["figure.titlesize"]
    fig.suptitle(_wrap(text, fig, size), fontsize=size, color="0.15", linespacing=1.2)


def mark(artist: Any, what: str) -> Any:
    """Tag a drawn artist with what it shows (its gid), so a caption can name exactly what the figure holds."""
    artist.set_gid(what)
    return artist


def drawn(fig: Figure) -> set[str]:
    """The tags (:func:`mark`) of every artist in the figure's visible axes: what a caption may mention."""
    found: set[str] = set()
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for artist in ax.get_children():
            gid = artist.get_gid()
            if gid:
                found.add(gid)
    return found


class PlainLogFormatter(LogFormatter):
    """Log-axis tick labels as plain numbers ("20", "0.5") instead of "2 x 10^1"."""

    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return f"{x:g}"


def tidy_grid(ax: Axes, log: bool) -> None:
    """Major grid lines; on a log y axis faint minor lines too, and plain labels for moderate numbers.

    Call after plotting: the labels depend on the final limits.
    """
    ax.grid(True, which="major")
    if not log:
        return
    ax.grid(True, which="minor", alpha=0.12)
    lo, hi = ax.get_ylim()
    if ax.get_yscale() == "log" and lo >= 1e-2 and hi <= 1e5:
        ax.yaxis.set_major_formatter(PlainLogFormatter())
        ax.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def grid_shape(n: int, max_cols: int = 4) -> tuple[int, int]:
    cols = min(n, max_cols)
    return math.ceil(n / cols), cols


def spans_decades(values: Iterable[float], ratio: float = LOG_RATIO) -> bool:
    """True when the finite values are all positive and max/min exceeds ``ratio``: then use a log axis."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    v = v[np.isfinite(v)]
    if v.size < 2 or (v <= 0).any():
        return False
    return float(v.max() / v.min()) > ratio
