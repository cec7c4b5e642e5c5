"""The public Python API over the shared runner: :mod:`.evaluate` (``evaluate``, ``certify``,
``estimate_lipschitz``) and :mod:`.benchmark` (RobustBench's ``benchmark``, with :mod:`.benchmark_lm` and
:mod:`.robustbench_args`). ``import robustbench_filters`` exports these names lazily.
"""
