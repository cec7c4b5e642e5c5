"""How many examples a run takes: a count the user gives, a default that is a cap, or every example.

``n_examples`` is exact when a user gives it (more than the data holds is refused), a cap when it is a kind's
default (:class:`UpTo`: 256 images, or all of them when the data has fewer), and every example when it is None.
Kept at the bottom of the package: configs declare the defaults, the runner's selection applies them.
"""

from __future__ import annotations

from .errors import RobfiltError
from .surface import Surface, current_surface, given


class UpTo(int):
    """A default example count that is a cap: ``UpTo(256)`` takes 256 examples, or all of them when the data has
    fewer. A count the user gives is exact (more than the data holds is refused); ``None`` means every example."""

    def __repr__(self) -> str:
        return f"UpTo({int(self)})"


def example_count(total: int, n: int | None) -> int:
    """How many of ``total`` examples ``n_examples = n`` selects (see :class:`UpTo`)."""
    if n is None:
        return total
    if isinstance(n, UpTo):
        return min(int(n), total)
    if n > total:
        every = "" if current_surface() is Surface.CLI else f", or {given('n_examples', 'None')} for every example"
        raise RobfiltError(
            f"{given('n_examples', str(n))} is larger than the data ({total} examples); pass "
            f"{given('n_examples', str(total))} or fewer{every}."
        )
    return int(n)
