"""The vocabulary every tier shares: errors, the names of closed vocabularies (norms, attacks, corruptions,
precisions), atomic I/O, how an option is spelt on each surface, progress hooks, versions and the torchrun context.

Nothing here imports torch at module level, so the command line answers ``--help`` without it.
"""
