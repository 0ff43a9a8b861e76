"""Measuring models: parameter counts, the stable rank of a matrix, memory and
host work.

Chapters 4, 6, 7 and 8 count parameters; chapters 4 and 6 measure how far
attention's output collapses towards a low-rank matrix; chapter 3 measures the
memory a computation allocates on the CPU; chapter 11 counts the operators a
decoding step dispatches (:class:`DispatchCounter`). One definition of each,
here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextlib import contextmanager

import pandas as pd
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import _validate as check

__all__ = [
    "count_parameters",
    "parameter_table",
    "stable_rank",
    "peak_cpu_bytes",
    "DispatchCounter",
]


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """The number of scalar parameters of ``module`` (shared parameters counted
    once).

    ``trainable_only=True`` counts only those with ``requires_grad`` (frozen
    ones left out).
    """
    check.module(module)
    return sum(
        p.numel()
        for p in module.parameters()
        if p.requires_grad or not trainable_only
    )


def parameter_table(module: nn.Module, max_depth: int = 1) -> pd.DataFrame:
    """A table of the parameter count of every submodule down to ``max_depth``
    levels.

    Submodules without parameters (dropout, activations) are left out. Columns:
    ``module`` (dotted name), ``type`` and ``parameters``; a last row ``total``,
    which counts a shared parameter once. Where a module shares a parameter with
    an earlier one (a head tied to the token embedding), a column ``tied to``
    names the module that holds it first, so the rows visibly count it twice.
    """
    check.module(module)
    check.positive_int("max_depth", max_depth)
    first_name = {}  # parameter -> its first name in the module
    for name, parameter in module.named_parameters(remove_duplicate=False):
        first_name.setdefault(parameter, name)
    rows = []
    for name, child in module.named_modules():
        depth = name.count(".") + 1
        count = count_parameters(child)
        # skip dropout, activations
        if name and depth <= max_depth and count > 0:
            tied = {
                first_name[p].rpartition(".")[0] or "(the model itself)"
                for p in child.parameters()
                if not first_name[p].startswith(name + ".")
            }
            rows.append(
                (name, type(child).__name__, count, ", ".join(sorted(tied)))
            )
    total = count_parameters(module)
    rows.append(("total", type(module).__name__, total, ""))
    columns = ["module", "type", "parameters", "tied to"]
    table = pd.DataFrame(rows, columns=columns)
    if not table["tied to"].any():
        table = table.drop(columns="tied to")
    return table


def stable_rank(matrix: torch.Tensor) -> float:
    """``||M||_F^2 / ||M||_2^2``: the sum of squared singular values over the
    largest one squared.

    Between 1 (every row along one direction) and ``min(M.shape)`` (all singular
    values equal), and, unlike the rank, not fooled by tiny singular values that
    are rounding noise.
    """
    check.tensor("matrix", matrix, floating=True, min_ndim=2)
    if matrix.ndim != 2:
        raise ValueError(
            f"matrix must be 2-D, got shape {tuple(matrix.shape)}; "
            "pick one, e.g. x[0]"
        )
    singular = torch.linalg.svdvals(matrix.detach().double())
    if singular[0] == 0:
        raise ValueError(
            "the stable rank of a zero matrix is undefined (0 / 0)"
        )
    return float((singular**2).sum() / singular[0] ** 2)


@contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (PyTorch's profiler logs each start and stop
    there)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_cpu_bytes(fn: Callable, *args, **kwargs) -> int:
    """Run ``fn(*args, **kwargs)`` once; return the most CPU memory it held
    allocated at once.

    What is measured: the bytes PyTorch's CPU allocator hands out during the
    call (the storage of every tensor, and the scratch buffers of fused
    kernels), replayed from the profiler's allocation and free events in time
    order; the peak of that running total. Memory allocated before the call (the
    inputs) does not count; the result, if kept, counts up to its creation. Not
    the process's resident memory (RSS): Python objects and the allocator's own
    caching are not included.
    """
    check.function("fn", fn)
    with (
        _quiet_stderr(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        result = fn(*args, **kwargs)
        del result
    events = [  # (time, +bytes allocated or -bytes freed), CPU memory only
        (event.start_ns(), event.nbytes())
        for event in prof.profiler.kineto_results.events()
        if event.name() == "[memory]"
        and str(event.device_type()).endswith("CPU")
    ]
    total = peak = 0
    for _, nbytes in sorted(events):
        total += nbytes
        peak = max(peak, total)
    return peak


class DispatchCounter(TorchDispatchMode):
    """Count the ATen operators that run inside a ``with`` block: the host's
    work, measured.

    ``with DispatchCounter() as counter: model.generate(...)`` counts every
    operator PyTorch dispatches (``ops``, views included: each is Python-to-C++
    work); ``non_view_ops``, those that are not views (on a GPU, about one
    kernel launch each); ``syncs``, those that read a value back into Python
    (``aten._local_scalar_dense``, behind ``.item()``, ``int(t)``, ``if
    t.any()``): on a GPU each waits for the device to finish everything queued;
    ``elements_written``, the elements written by operators that are neither
    views nor allocations (an in-place copy into a slice counts the slice).
    ``by_name`` holds the count of each operator. Counts are exact and the same
    on every machine with the same version of torch; they do not see what
    happens inside an operator's kernel.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops, self.non_view_ops, self.syncs, self.elements_written = (
            0,
            0,
            0,
            0,
        )
        self.by_name: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.name().removeprefix("aten::")
        self.ops += 1
        self.by_name[name] = self.by_name.get(name, 0) + 1
        if name == "_local_scalar_dense":
            self.syncs += 1
        if not func.is_view:
            self.non_view_ops += 1
        if not func.is_view and not name.startswith(("empty", "new_empty")):
            outputs = out if isinstance(out, (tuple, list)) else (out,)
            self.elements_written += sum(
                t.numel() for t in outputs if isinstance(t, torch.Tensor)
            )
        return out
