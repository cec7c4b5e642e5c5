"""Vocabulary and utilities every tier shares: errors, names of closed vocabularies, atomic I/O, how options are spelt on each surface, progress hooks, versions, torchrun context.

Nothing here imports torch at module level, so the command line can answer ``--help`` without it.
"""
