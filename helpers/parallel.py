"""Independent runs side by side: one process and one PyTorch thread per run.

A small model cannot keep several cores busy with one run, but independent runs
(seeds, models) can share the cores: :func:`run_in_processes` runs a list of
such jobs side by side, one process and one thread each, and falls back to a
plain loop when asked for one worker. :func:`machine_label` names the machine
for results that a script ships as data.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor

import torch

from helpers import _validate as check

__all__ = ["machine_label", "run_in_processes"]


def _one_thread() -> None:
    torch.set_num_threads(1)


def run_in_processes(
    function: Callable, jobs: Iterable[Mapping], *, workers: int = 2, **shared
) -> list:
    """``[function(**job, **shared) for job in jobs]``, computed by ``workers``
    processes.

    Each worker is a fresh Python process (the ``spawn`` start method, safe with
    PyTorch's thread pools) that uses one PyTorch thread and inherits the
    environment, so numerics settings such as ``ATEN_CPU_CAPABILITY`` apply to
    it too. ``function`` must therefore be importable by name (defined in a
    module such as ``helpers.tasks.shapes`` or in a script, not in a notebook),
    and its arguments and results must be picklable. Jobs start in the order
    given (put the longest first); results come back in that order.
    ``workers=1`` runs the jobs here, one after the other, on the current thread
    settings.
    """
    check.positive_int("workers", workers)
    check.function("function", function)
    jobs = list(jobs)
    for index, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            raise TypeError(
                f"each job must be a dict of keyword arguments, job {index} is "
                f"{type(job).__name__}; write jobs=[dict(seed=0), dict(seed=1)]"
            )
        if clash := set(job) & set(shared):
            raise ValueError(
                f"job {index} and the shared arguments both set {sorted(clash)}"
            )
    if workers == 1:
        return [function(**job, **shared) for job in jobs]
    # A worker imports `function` by name: a script's __main__ it can re-run, a
    # notebook's not.
    in_notebook = function.__module__ == "__main__" and not hasattr(
        sys.modules["__main__"], "__file__"
    )
    if in_notebook or "<locals>" in function.__qualname__:
        raise ValueError(
            f"{function.__qualname__} is defined in a notebook (or inside a "
            "function), so a fresh worker process cannot import it; move it "
            "into a module, or pass workers=1"
        )
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_one_thread
    ) as pool:
        futures = [pool.submit(function, **job, **shared) for job in jobs]
        return [future.result() for future in futures]


def machine_label(device: str = "cpu", workers: int = 1) -> str:
    """The processor (or GPU), its cores and the threads a run used, for results
    shipped as data."""
    if str(device).startswith("cuda"):
        return (
            f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
        )
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    threads = torch.get_num_threads()
    threads = (
        "one thread per run"
        if workers > 1 or threads == 1
        else f"{threads} threads"
    )
    return (
        f"{name}, {os.cpu_count()} cores, {threads}, torch {torch.__version__}"
    )
