"""Statistics: intervals (:mod:`.intervals`: Wilson, Clopper-Pearson, bootstrap, t), paired tests (:mod:`.paired`),
the vacuity of bounds (:mod:`.vacuity`) and the aggregates that reports print and the gate judges
(:mod:`.aggregates`), each computed once, here.
"""
