"""The public Python API over the shared runner: :mod:`.evaluate` (``evaluate``, ``certify``,
``estimate_lipschitz``), :mod:`.attack` (adversarial examples of tensors) and :mod:`.benchmark` (RobustBench's
``benchmark``, with :mod:`.benchmark_lm` and :mod:`.robustbench_args`). ``import robustbench_filters`` exports
these names lazily.
"""
