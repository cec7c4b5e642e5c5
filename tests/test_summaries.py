"""Typed summaries: every kind of run's summary.json reads back as its typed summary and writes back byte for byte;
a summary of another format version, a manifest without a kind or of an unknown kind, and a renamed key are each
refused in one line (exit 2 from the CLI, no traceback); the report family comes from the manifest alone."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from run_summaries import image_summary, lm_summary

from robustbench_filters.cli import run as cli_run
from robustbench_filters.core.errors import RobfiltError, RunStateError
from robustbench_filters.core.io import sha256_file
from robustbench_filters.runs.fingerprint import manifest_fingerprint
from robustbench_filters.runs.folder import RunWriter, load_run
from robustbench_filters.summaries import (
    VERSION,
    CertifySummary,
    CorruptionSummary,
    ImageAttackSummary,
    LipschitzSummary,
    LMAttackSummary,
    SeqlenSummary,
    read_summary,
    report_family,
    summary_type,
)

COMMITTED = Path(__file__).resolve().parents[1] / "reports"


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny run of every kind the runner makes, plus a sequence-length study."""
    from robustbench_filters.api.evaluate import certify, estimate_lipschitz, evaluate
    from robustbench_filters.lipschitz.seqlen_run import SeqlenConfig, sequence_length_run

    out, common = tmp_path_factory.mktemp("kinds"), {"checkpoint": "none", "seed": 1}
    evaluate(["deit", "deit-bsa"], ["fgsm", "pgd"], [0.02], n_examples=4, steps=2, out=out / "image", **common)
    evaluate(["lm"], ["fgsm", "wordswap"], [0.05], n_examples=2, rates=[0.0, 0.2], out=out / "lm", **common)
    evaluate(["deit"], ["corruption:contrast"], n_examples=3, severities=[1, 2], out=out / "corruption", **common)
    estimate_lipschitz(["deit"], n_examples=2, method="power", power_iters=3, per_layer=True, out=out / "lipschitz",
                       **common)  # fmt: skip
    certify(["deit"], [0.25], n_examples=2, n0=10, n=20, out=out / "certify", **common)
    sequence_length_run(out / "seqlen", SeqlenConfig(ns=(8, 16), dim=16, heads=2, trials=2))
    return out


def _written(summary: dict) -> str:
    return json.dumps(summary, indent=2) + "\n"  # as robustbench_filters.core.io.atomic_write_json writes it


KINDS = {
    "image": ImageAttackSummary,
    "lm": LMAttackSummary,
    "corruption": CorruptionSummary,
    "lipschitz": LipschitzSummary,
    "certify": CertifySummary,
    "seqlen": SeqlenSummary,
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_reads_typed_and_writes_back_byte_for_byte(every_kind: Path, kind: str) -> None:
    run = load_run(every_kind / kind)
    assert type(run.summary) is KINDS[kind]
    assert _written(run.summary.to_dict()) == (every_kind / kind / "summary.json").read_text()


def test_typed_fields_read_what_was_written(every_kind: Path) -> None:
    image = every_kind / "image"
    s = load_run(image).summary
    assert isinstance(s, ImageAttackSummary) and s.family == "image" and list(s.models) == ["deit", "deit-bsa"]
    written = json.loads((image / "summary.json").read_text())
    raw = written["models"]["deit"]["robust"]
    assert len(raw) == 2
    assert [(r.attack, r.eps, r.acc, r.n) for r in s.models["deit"].robust] == [
        (r["attack"], r["eps"], r["acc"], r["n"]) for r in raw
    ]
    # format 3 records the budget each attack ran with, not prose: the user gave --steps 2, pgd's step is 0.15 eps
    assert (s.steps, s.step_size) == (2, None) and written["format_version"] == 3
    assert [(r.attack, r.steps, r.step_size) for r in s.models["deit"].robust] == [
        ("fgsm", 1, None),
        ("pgd", 2, pytest.approx(0.15 * 0.02)),
    ]
    assert s.sanity_checks() and all(c.status in ("pass", "warn", "fail") for c in s.sanity_checks())
    assert s.checks_summary.passes == written["checks_summary"]["pass"]
    lm = load_run(every_kind / "lm").summary
    assert isinstance(lm, LMAttackSummary)
    swap = [r for r in lm.models["lm"].results if r.attack == "wordswap"]
    assert swap and all(r.rate == r.eps for r in swap)
    assert load_run(every_kind / "seqlen").summary.sanity_checks() == []


def test_committed_run_folders_read_and_write_back(tmp_path: Path) -> None:
    """Every run folder committed under reports/ (when present: the study is re-run from time to time)."""
    folders = sorted(p.parent for p in COMMITTED.rglob("summary.json") if (p.parent / "manifest.json").exists())
    if not folders:
        pytest.skip("no committed run folders under reports/")
    for folder in folders:
        manifest = json.loads((folder / "manifest.json").read_text())
        text = (folder / "summary.json").read_text()
        typed = read_summary(json.loads(text), manifest["kind"], manifest.get("family"), str(folder))
        assert _written(typed.to_dict()) == text, folder


def _resign_summary(folder: Path, edit) -> None:
    summary = json.loads((folder / "summary.json").read_text())
    edit(summary)
    (folder / "summary.json").write_text(json.dumps(summary))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["summary_sha256"] = sha256_file(folder / "summary.json")
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _resign_manifest(folder: Path, edit) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    manifest["fingerprint"] = manifest_fingerprint(manifest)
    summary = json.loads((folder / "summary.json").read_text())
    summary["fingerprint"] = manifest["fingerprint"]
    (folder / "summary.json").write_text(json.dumps(summary))
    manifest["summary_sha256"] = sha256_file(folder / "summary.json")
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _report_refuses(run: Path, out: Path, capfd: pytest.CaptureFixture[str], *needles: str) -> None:
    assert cli_run(["report", str(run), "--out", str(out), "-q"]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    assert not out.exists()


def test_a_summary_of_another_version_is_one_line(finished_run_copy: Path, tmp_path: Path, capfd) -> None:
    _resign_summary(finished_run_copy, lambda s: s.update(format_version=7))
    _report_refuses(finished_run_copy, tmp_path / "rep", capfd, f"summary.json of run folder {finished_run_copy}",
                    "format version 7; this robfilt reads 2 or 3: upgrade robfilt")  # fmt: skip
    _resign_summary(finished_run_copy, lambda s: s.update(format_version=1))
    with pytest.raises(RobfiltError, match="format version 1; this robfilt reads 2 or 3: re-run it"):
        load_run(finished_run_copy)


def test_a_renamed_or_missing_key_is_one_line(finished_run_copy: Path, tmp_path: Path, capfd) -> None:
    def rename(s: dict) -> None:
        clean = s["models"]["deit"]["clean"]
        clean["accuracy"] = clean.pop("acc")

    _resign_summary(finished_run_copy, rename)
    _report_refuses(finished_run_copy, tmp_path / "rep", capfd, "at models.deit.clean has key 'accuracy'")
    _resign_summary(finished_run_copy, lambda s: s["models"]["deit"]["clean"].pop("accuracy"))
    with pytest.raises(RobfiltError, match=r"at models.deit.clean lacks 'acc'"):
        load_run(finished_run_copy)


def test_a_manifest_without_a_kind_or_of_an_unknown_kind_is_one_line(
    finished_run_copy: Path, tmp_path: Path, capfd
) -> None:
    _resign_manifest(finished_run_copy, lambda m: m.update(kind="frobnicate"))
    _report_refuses(finished_run_copy, tmp_path / "a", capfd, f"run folder {finished_run_copy} is a 'frobnicate' run",
                    "upgrade robfilt or re-run it")  # fmt: skip
    _resign_manifest(finished_run_copy, lambda m: m.pop("kind"))
    _report_refuses(finished_run_copy, tmp_path / "b", capfd, f"run folder {finished_run_copy} records no kind")


def test_an_attack_run_without_a_family_is_one_line(finished_run_copy: Path, tmp_path: Path, capfd) -> None:
    """The family is not guessed from the rows or the summary: an attack run must record image or lm."""
    _resign_manifest(finished_run_copy, lambda m: m.pop("family"))
    _report_refuses(finished_run_copy, tmp_path / "rep", capfd, "is an attack run of family None, not image or lm")


def test_report_family_comes_from_kind_and_family_alone() -> None:
    cases = {("attack", "image"): "image", ("attack", "lm"): "lm", ("corruption", "image"): "image",
             ("lipschitz", None): "lipschitz", ("lipschitz", "lm"): "lipschitz", ("certify", "image"): "certify",
             ("seqlen", None): "seqlen"}  # fmt: skip
    for (kind, family), expected in cases.items():
        assert report_family(kind, family, "run folder r") == expected
    with pytest.raises(RobfiltError, match="the study's 'study-seqlen' piece"):
        report_family("study-seqlen", "lm", "run folder r")
    with pytest.raises(RobfiltError, match="attack run of family 'text', not image or lm"):
        report_family("attack", "text", "run folder r")


def test_a_summary_of_another_kind_fails_before_writing(tmp_path: Path) -> None:
    """A measurement constructs its typed summary (a drifted key is a TypeError there); a summary of another kind's
    type handed to the writer is a loud bug too, and leaves no finished folder."""
    rows = pd.DataFrame({"model": ["m"], "example_id": [0], "attack": ["clean"], "eps": [0.0], "correct": [True]})
    out = tmp_path / "run"
    with RunWriter(out, "attack", {"n": 1}, seed=0, extra={"family": "image"}) as w:
        w.write_part("all", rows)
        with pytest.raises(RunStateError, match="made a LMAttackSummary, not a ImageAttackSummary.*this is a bug"):
            w.finish(rows, lm_summary())
    assert not (out / "summary.json").exists() and not (out / "rows.parquet").exists()
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"  # resumable, not complete


def test_the_writer_stamps_the_fingerprint_on_the_summary_it_returns(tmp_path: Path) -> None:
    rows = pd.DataFrame({"model": ["m"], "example_id": [0], "attack": ["clean"], "eps": [0.0], "correct": [True]})
    built = image_summary(rows)
    assert built.fingerprint == ""
    with RunWriter(tmp_path / "run", "attack", {"n": 1}, seed=0, extra={"family": "image"}) as w:
        w.write_part("all", rows)
        written = w.finish(rows, built)
    assert written.fingerprint == w.fp and written.format_version == VERSION == 3
    assert load_run(tmp_path / "run").summary == written
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == written.to_dict()


@pytest.mark.parametrize("kind", ["image", "corruption", "certify"])
def test_a_summary_json_baseline_holds_the_metrics_of_its_run_folder(every_kind: Path, kind: str) -> None:
    """Read by kind, a committed summary.json gives the gate the metrics the run's rows give (corruption runs'
    per-severity accuracies too)."""
    from robustbench_filters.gating.metrics import load_baseline

    def table(path: Path) -> dict[str, tuple]:
        return {m.key: (m.value, round(m.lo, 12), round(m.hi, 12), m.n, m.vacuous) for m in load_baseline(path)}

    from_summary = table(every_kind / kind / "summary.json")
    assert from_summary and from_summary == table(every_kind / kind)


def test_the_registry_of_run_kinds_names_each_kinds_classes() -> None:
    """Every row's summary finds its row again, every config names a kind of the table, and the API runs every
    run config robfilt has (its plain mapping, beside the code that runs measurements)."""
    from robustbench_filters.api.evaluate import MEASUREMENTS
    from robustbench_filters.configs import RunConfig
    from robustbench_filters.summaries import KINDS, RUN_KINDS, kind_of

    assert len({(k.name, k.family) for k in RUN_KINDS}) == len(RUN_KINDS)
    for row in RUN_KINDS:
        assert kind_of(row.summary) is row and summary_type(row.name, row.family, "r") is row.summary
    with pytest.raises(RunStateError, match="in no row of the registry"):
        kind_of(dict)

    def subclasses(cls: type) -> set[type]:
        return {c for sub in cls.__subclasses__() for c in {sub, *subclasses(sub)}}

    runnable = {c for c in subclasses(RunConfig) if c.KIND}
    assert runnable == set(MEASUREMENTS) and all(c.KIND in KINDS for c in runnable)


def test_the_api_builds_each_kinds_measurement_from_the_registry() -> None:
    from robustbench_filters.api.evaluate import measurement_for
    from robustbench_filters.configs import CertifyConfig, CorruptionConfig, ImageAttackConfig, LipschitzConfig

    for cls, kind in ((ImageAttackConfig, "attack"), (CorruptionConfig, "corruption"), (CertifyConfig, "certify"),
                      (LipschitzConfig, "lipschitz")):  # fmt: skip
        assert measurement_for(cls(models=("deit",))).kind == kind
