"""The Lipschitz report shows where the certified bounds lose (rows of ``robfilt lipschitz --gap``), at every rho."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from robustbench_filters.api.evaluate import estimate_lipschitz
from robustbench_filters.configs import LipschitzConfig
from robustbench_filters.report import build_report


def test_gap_rows_reach_the_report_for_every_rho(tmp_path: Path) -> None:
    config = LipschitzConfig(models=("deit",), checkpoint="none", data="synthetic", n_examples=1, batch_size=1,
                             method="power", power_iters=5, gap=True, gap_rhos=(1e-3, 0.1), gap_taylor=False)  # fmt: skip
    estimate_lipschitz(config=config, out=tmp_path / "run")
    result = build_report([tmp_path / "run"], tmp_path / "report", html=False)
    assert "lipschitz_gap" in result.tables and "lipschitz_gap" in result.figures
    table = pd.read_csv(next(p for p in result.tables["lipschitz_gap"] if str(p).endswith(".csv")))
    assert set(table["rho"].astype(float)) == {1e-3, 0.1}  # rows differing only in rho are not merged away
    model = table[table["layer"] == "model"]
    assert len(model) == 2 and (model["lost_composition"] >= -1e-9).all()
    assert (model["local_upper"] <= model["global_upper"] + 1e-9).all()
    index = (tmp_path / "report" / "index.md").read_text()
    assert "Where the certified Lipschitz bounds lose" in index and "more than one run" not in index
