"""Runs: the run-folder format (:mod:`.folder`), its lock (:mod:`.lock`), units and example selection
(:mod:`.units`), the measurement contract (:mod:`.measurement`) and the one run loop (:mod:`.runner`)."""

from .folder import FORMAT_VERSION, Run, RunWriter, load_run, verify_run
from .lock import RunLock, is_locked
from .units import Unit, select_examples, unit_seed

__all__ = [
    "FORMAT_VERSION",
    "Run",
    "RunLock",
    "RunWriter",
    "Unit",
    "is_locked",
    "load_run",
    "select_examples",
    "unit_seed",
    "verify_run",
]
