"""The Lipschitz report shows where the certified bounds lose (rows of ``robfilt lipschitz --gap``), at every rho."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from robustbench_filters.api.evaluate import estimate_lipschitz
from robustbench_filters.configs import LipschitzConfig
from robustbench_filters.report import build_report


def test_gap_rows_reach_the_report_for_every_rho(tmp_path: Path) -> None:
    # a one-block DeiT keeps linear bound propagation (--gap-crown) to seconds
    config = LipschitzConfig(models=("deit",), checkpoint="none", data="synthetic", n_examples=1, batch_size=1,
                             model_args=("depth=1", "embed_dim=16", "num_heads=2"), method="power", power_iters=5,
                             gap=True, gap_rhos=(1e-3, 0.1), gap_taylor=False, gap_crown=True)  # fmt: skip
    estimate_lipschitz(config=config, out=tmp_path / "run")
    result = build_report([tmp_path / "run"], tmp_path / "report", html=False)
    assert "lipschitz_gap" in result.tables and "lipschitz_gap" in result.figures
    table = pd.read_csv(next(p for p in result.tables["lipschitz_gap"] if str(p).endswith(".csv")))
    assert set(table["rho"].astype(float)) == {1e-3, 0.1}  # rows differing only in rho are not merged away
    model = table[table["layer"] == "model"]
    assert len(model) == 2 and (model["lost_composition"] >= -1e-9).all()
    assert (model["local_upper"] <= model["global_upper"] + 1e-9).all()
    # linear bound propagation's bound sits beside the others, above the empirical gain, on the model rows only
    assert model["local_crown"].notna().any() and (model["local_crown"].dropna() >= model["empirical"] - 1e-9).all()
    assert table[table["layer"] != "model"]["local_crown"].isna().all()
    medians = json.loads((tmp_path / "run" / "summary.json").read_text())["gap_log10_median"]
    crowned = [r for r in medians if r["layer"] == "model" and r["local_crown"] is not None]
    assert crowned and all(r["local_crown"] >= r["empirical"] - 1e-9 for r in crowned)
    index = (tmp_path / "report" / "index.md").read_text()
    assert "Where the certified Lipschitz bounds lose" in index and "more than one run" not in index
