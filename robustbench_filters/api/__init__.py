"""The public Python API: the functions :mod:`robustbench_filters` exports (:mod:`.evaluate`, :mod:`.benchmark`) over the shared runner."""
