"""The computation graph the bounds are propagated through: ops in topological order, node 0 the input.

A graph is built once per model (:mod:`.build`) and checked against the model's own forward pass before any bound
is computed; ``output`` is the logits node. The margin node of a verification query is appended per batch of
labels (:meth:`Graph.with_margin`), so one graph serves every example.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .ops import Input, LinComb, Margin, Op


@dataclass
class Graph:
    """Ops in topological order (``ops[0]`` is :class:`~.ops.Input`), the output node and what was built from."""

    ops: list[Op]
    output: int
    name: str = "model"
    kind: str = ""  # "vit" | "sequential"
    notes: dict = field(default_factory=dict)
    dtype: torch.dtype = torch.float64
    #: multiply-adds of the model's forward pass that the graph leaves out (tokens that never reach the output),
    #: so a pass stays one forward pass of the model
    pruned_macs: int = 0

    @classmethod
    def start(cls, input_shape: tuple[int, ...], name: str = "model", kind: str = "") -> Graph:
        return cls([Input(tuple(input_shape))], 0, name, kind)

    def add(self, op: Op) -> int:
        for i in op.inputs:
            if not 0 <= i < len(self.ops):
                raise ValueError(f"op {op.name} reads node {i}, which does not exist yet")
        self.ops.append(op)
        return len(self.ops) - 1

    def shape(self, i: int) -> tuple[int, ...]:
        return self.ops[i].shape

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.ops[0].shape

    @property
    def input_size(self) -> int:
        n = 1
        for s in self.input_shape:
            n *= s
        return n

    def with_margin(self, y: torch.Tensor) -> Graph:
        """A shallow copy with a :class:`~.ops.Margin` node ``z_y - z_t`` after the output."""
        g = Graph(list(self.ops), self.output, self.name, self.kind, dict(self.notes), self.dtype, self.pruned_macs)
        g.output = g.add(Margin(self.output, y, self.shape(self.output)))
        return g

    def consumers(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.ops]
        for i, op in enumerate(self.ops):
            for j in op.inputs:
                out[j].append(i)
        return out

    def needs_bounds(self) -> list[bool]:
        """Nodes whose concrete bounds some relaxation reads (inputs of nonlinear ops), and the output."""
        need = [False] * len(self.ops)
        for op in self.ops:
            if not op.affine:
                for j in op.inputs:
                    need[j] = True
        need[self.output] = True
        return need

    def macs(self) -> int:
        """Multiply-adds of one forward pass on one example (the unit of the pass counts)."""
        return max(1, sum(op.macs() for op in self.ops) + self.pruned_macs)

    def evaluate(self, x: torch.Tensor, upto: int | None = None) -> list[torch.Tensor]:
        """Every node's exact value for inputs ``x`` of shape (B, *input_shape) (or flattened (B, K))."""
        vals = [x.reshape(x.shape[0], *self.input_shape)]
        last = self.output if upto is None else upto
        for op in self.ops[1 : last + 1]:
            vals.append(op.forward(*[vals[j] for j in op.inputs]))
        return vals

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.evaluate(x)[self.output]


def residual(g: Graph, x: int, f: int, y0: int | None, lam: float, name: str) -> int:
    """``x + f`` or, with the boosting residual, ``(1 - lam) x + f + lam y0``."""
    if y0 is None or lam == 0.0:
        return g.add(LinComb((x, f), (1.0, 1.0), g.shape(x), name))
    return g.add(LinComb((x, f, y0), (1.0 - lam, 1.0, lam), g.shape(x), name))
