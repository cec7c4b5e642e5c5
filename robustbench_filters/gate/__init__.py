"""``robfilt check``, the robustness gate as an entry point: read a spec (:mod:`.spec`, its ``[[require]]`` tables in
:mod:`.require`), make its runs through the API or take finished ones, and hand them to the gate's judgement
(:mod:`robustbench_filters.gating`, which reads run folders only) for the verdict and its outputs (:mod:`.run`)."""
