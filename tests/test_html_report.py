"""``robfilt report --html``: one self-contained index.html with inline figures, sortable tables, run ids and
every sanity check (a failing one shown as failing). ``-m slow`` renders it in headless Chromium."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_synthetic import synthetic_runs

from robustbench_filters.cli import run as cli_run
from robustbench_filters.report import build_report

VOID = {"meta", "img", "br", "link", "input", "hr"}


class _Page(HTMLParser):
    """Collects tables, images, scripts and any external reference; checks that tags nest properly."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tables: list[str] = []
        self.images: list[str] = []
        self.external: list[str] = []
        self.sortable = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for key in ("src", "href"):
            if a.get(key) and re.match(r"^(https?:)?//", a[key] or ""):
                self.external.append(a[key] or "")
        if tag == "table":
            self.tables.append(a.get("id") or "")
            self.sortable += "sortable" in (a.get("class") or "")
        if tag == "img":
            self.images.append(a.get("src") or "")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"</{tag}> does not close the open tag")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("html")
    result = build_report(synthetic_runs(root / "runs"), root / "rep", figures=("png",), allow_mixed=True,
                          attention=False, html=True)  # fmt: skip
    assert result.html == root / "rep" / "index.html"
    return result.html


def test_page_is_self_contained_and_complete(page: Path) -> None:
    html = page.read_text()
    parsed = _Page()
    parsed.feed(html)
    assert parsed.errors == [] and parsed.stack == []
    assert parsed.external == [] and "http://" not in html and "https://" not in html
    assert "default-src 'none'" in html  # the browser may not fetch anything
    assert len(parsed.tables) == 11 and parsed.sortable == len(parsed.tables)  # runs, 2 x checks, 8 report tables
    assert {"runs", "checks", "t-robust_accuracy", "t-perplexity", "t-lipschitz_bounds"} <= set(parsed.tables)
    assert len(parsed.images) == 4 and all(src.startswith("data:image/svg+xml;base64,") for src in parsed.images)
    svg = base64.b64decode(parsed.images[0].split(",", 1)[1]).decode()
    assert "<svg" in svg and "n = 24" in svg  # the subtitle (drawn as paths, named in a comment)
    for run in ("img@", "corr@", "lm@", "lip-img@", "lip-lm@", "seq@"):
        assert f">{run}" in html
    assert "1 of 24 sanity checks FAILED" in html
    flagged = re.search(r'id="checks-flagged".*?</table>', html, re.S).group(0)  # shown, not folded away
    assert flagged.count("<tr>") == 2 and "deit-bsa" in flagged and 'class="status-fail">fail<' in flagged
    assert "<script>" in html and "aria-sort" in html


def test_cli_html_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = synthetic_runs(tmp_path / "runs", failing_check=False)
    out = tmp_path / "rep"
    assert cli_run(["report", str(runs[0]), "--out", str(out), "--figures", "png", "--html"]) == 0
    assert "index.html" in capsys.readouterr().out
    html = (out / "index.html").read_text()
    assert "All 8 of 8 sanity checks passed" in html and 'class="status-fail"' not in html
    assert 'id="checks-flagged"' not in html
    assert cli_run(["report", str(runs[0]), "--out", str(out), "--figures", "png"]) == 0
    assert not (out / "index.html").exists()  # a report without --html leaves no stale page behind


CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-logging=stderr", "--v=0",
]  # fmt: skip


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run_chromium(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:  # a fresh, empty profile every time
        return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.slow
def test_page_renders_in_headless_chromium(page: Path, tmp_path: Path) -> None:
    from PIL import Image

    binary = _chromium()
    if binary is None:
        pytest.skip("chromium not found; install Debian's chromium to render the HTML report")
    url = page.as_uri() + "#sort=t-robust_accuracy:2:desc"
    dom = _run_chromium(binary, "--virtual-time-budget=5000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert re.search(r'<html[^>]*data-ready="(\d+)"', html), "the page's script did not finish"
    assert int(re.search(r'data-ready="(\d+)"', html).group(1)) >= 10
    assert "data-js-error" not in html
    console = [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln]
    assert console == [], console
    # the hash sorted the accuracy table by its first model column, descending: numbers come out non-increasing
    table = re.search(r'id="t-robust_accuracy".*?</table>', html, re.S).group(0)
    assert 'aria-sort="descending"' in table
    values = [float(v) for v in re.findall(r"<tr>(?:<td[^>]*>[^<]*</td>){2}<td[^>]*>([\d.]+)", table)]
    assert len(values) >= 8 and values == sorted(values, reverse=True)

    shot = tmp_path / "page.png"
    run = _run_chromium(binary, "--window-size=1200,1600", "--hide-scrollbars", f"--screenshot={shot}", page.as_uri())
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    image = Image.open(shot).convert("L")
    assert image.size == (1200, 1600)
    lo, hi = image.getextrema()
    assert hi - lo > 100 and len(set(image.getdata())) > 20  # text and tables were drawn, not a blank page
