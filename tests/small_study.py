"""The smoke study plan (1-2 seeds, 2 variants per family, a handful of examples) and a finished study as a clone
of the repository holds one: the tests of study write-ups, integrity and output folders run on it, so they do not
depend on the committed 3-seed study being measured with this robfilt's protocol."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import replace
from pathlib import Path

from robustbench_filters.study import StudyPlan, run_study
from robustbench_filters.study.plan import (
    CERTIFY_TEMPLATE,
    LIPSCHITZ_LM_TEMPLATE,
    LIPSCHITZ_VISION_TEMPLATE,
    LM_ATTACK_TEMPLATE,
    VISION_ATTACK_TEMPLATE,
    VISION_CORRUPTION_TEMPLATE,
    SeqlenEval,
)
from robustbench_filters.train.loop import Recipe


def smoke_plan(**changes) -> StudyPlan:
    """1 seed, 2 variants per family, 3 training steps, a handful of examples, short power iterations: the whole
    pipeline in seconds."""
    plan = StudyPlan(
        name="smoke",
        seeds=(0,),
        vision_models=("deit", "deit-grc"),
        lm_models=("lm", "lm-bsa"),
        vision_recipe=Recipe(steps=3, batch_size=16, eval_max=50),
        lm_recipe=Recipe(steps=3, batch_size=4, augment=False, eval_max=5),
        vision_attack=replace(VISION_ATTACK_TEMPLATE, n_examples=8, steps=2, eps=(0.01, 0.05)),
        vision_corruption=replace(VISION_CORRUPTION_TEMPLATE, n_examples=8, severities=(1,)),
        lm_attack=replace(LM_ATTACK_TEMPLATE, n_examples=4, rates=(0.0, 0.1), eps=(0.05,), steps=2),
        # 5 power iterations, not 50: the pipeline is under test here, not the estimates (half the smoke's time)
        lipschitz_vision=replace(LIPSCHITZ_VISION_TEMPLATE, n_examples=2, power_iters=5),
        lipschitz_lm=replace(LIPSCHITZ_LM_TEMPLATE, n_examples=2, seq_len=16, power_iters=5),
        certify=replace(CERTIFY_TEMPLATE, n_examples=4, n0=10, n=40, attack_examples=1),
        lipschitz_crown=None,  # a CROWN bound takes about a minute per image (test_study_crown.py runs one piece)
        seqlen=SeqlenEval(lm_ns=(8, 16), lm_windows=2, layer_ns=(16, 32), layer_trials=2),
    )
    return dataclasses.replace(plan, **changes)


#: two seeds, so a seed's runs can be copies of another's
TWO_SEEDS = smoke_plan(seeds=(0, 1))


def finished_study(out: Path) -> Path:
    """Run :data:`TWO_SEEDS` into ``out`` and strip it to what a clone holds (no checkpoints, no part files)."""
    run_study(TWO_SEEDS, out, report=False)
    shutil.rmtree(out / "checkpoints")
    for parts in list(out.rglob("parts")):
        shutil.rmtree(parts)
    return out
