"""Statistics: intervals (Wilson, Clopper-Pearson, bootstrap, t), paired tests, vacuity of bounds, and the aggregates a report prints and the gate judges (computed once, here)."""
