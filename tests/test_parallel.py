"""Tests of helpers.parallel: results in job order, the same as a plain loop, clear errors."""

from __future__ import annotations

import os

import pytest
import torch

from helpers.parallel import run_in_processes
from helpers.tasks.shapes import make_shapes_cnn


def seeded_output(seed: int, scale: float) -> tuple[int, int, torch.Tensor]:
    """Module-level (so a worker can import it): the pid, the thread count and a seeded result."""
    torch.manual_seed(seed)
    model = make_shapes_cnn(channels=4)
    with torch.no_grad():
        return (
            os.getpid(),
            torch.get_num_threads(),
            scale * model(torch.ones(1, 1, 50)),
        )


def test_processes_give_the_loop_results_in_job_order():
    jobs = [{"seed": seed} for seed in (3, 1, 2)]
    in_processes = run_in_processes(seeded_output, jobs, workers=2, scale=2.0)
    in_a_loop = run_in_processes(seeded_output, jobs, workers=1, scale=2.0)
    for (pid, threads, result), (_, _, expected) in zip(
        in_processes, in_a_loop, strict=True
    ):
        assert pid != os.getpid() and threads == 1  # a worker, on one thread
        torch.testing.assert_close(result, expected, rtol=0, atol=0)
    assert not torch.equal(in_a_loop[0][2], in_a_loop[1][2])  # the seeds differ


def test_errors_say_what_to_do():
    def local(seed):
        return seed

    with pytest.raises(
        ValueError, match="cannot import it; move it into a module"
    ):
        run_in_processes(local, [{"seed": 0}], workers=2)
    assert run_in_processes(local, [{"seed": 5}], workers=1) == [5]
    with pytest.raises(TypeError, match="each job must be a dict"):
        run_in_processes(seeded_output, [0, 1], workers=1)
    with pytest.raises(ValueError, match=r"both set \['scale'\]"):
        run_in_processes(seeded_output, [{"seed": 0, "scale": 1.0}], scale=2.0)
    with pytest.raises(ValueError, match="workers must be a positive int"):
        run_in_processes(seeded_output, [], workers=0)
    with pytest.raises(TypeError, match="function must be callable"):
        run_in_processes("train", [], workers=1)
