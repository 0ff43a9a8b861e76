"""Per-step cost of greedy decoding, with the key/value cache and without it (recomputation).

    OMP_NUM_THREADS=1 python scripts/bench_decode.py                     # CPU, one thread
    OMP_NUM_THREADS=1 python scripts/bench_decode.py --models chapter gpt2-small
    python scripts/bench_decode.py --device cuda --models chapter gpt2-small
    python scripts/bench_decode.py --out book/bench_decode.csv          # the shipped file

For each model, context length ``L`` and mode (``cache``: ``GPT.generate`` with its cache;
``no cache``: ``use_cache=False``, every step re-reads the whole prefix), a prompt of ``L``
random tokens is continued by ``steps`` greedy tokens, so the steps run at contexts
``L + 1 .. L + steps``. ``seconds_per_step`` is the median wall time of one step (the model
on the new token, or on the whole sequence, then the arg-max) over the ``steps`` steps of
``--repeats`` runs; the prompt's pass (the cache's prefill) is not timed (CUDA: the device is
synchronized before each reading of the clock).

The counts come from ``GPT.generate`` itself, continuing the prompt by ``1`` and by
``1 + steps`` tokens: the difference of the two runs, divided by ``steps``, is what one step of
its loop costs, the prompt's pass cancelled out. Per step:

- ``ops_per_step``: the ATen operators the step dispatches, counted by
  :class:`helpers.analysis.DispatchCounter` (views included): the host's work, which on a GPU is
  about one kernel launch each. An exact count, the same on every machine with the same torch;
- ``non_view_ops_per_step``: those that are not views (views launch no kernel on a GPU);
- ``syncs_per_step``: how many of those read a tensor's value back into Python
  (``aten._local_scalar_dense``: ``.item()``, ``int(t)``, ``if t.all()``), each a
  host-device synchronization on a GPU;
- ``elements_written_per_step``: the elements the step's operators write (outputs of every
  operator that is not a view or an allocation): with a preallocated cache it does not grow
  with ``L``; a cache grown by concatenation copies itself at every step, and a causal mask
  rebuilt at every step writes ``L`` entries, so either makes it grow.

Models: ``chapter`` is chapter 11's timing model (vocabulary 64, width 64, 2 layers, 4 heads);
``gpt2-small`` is GPT-2 small's shape (vocabulary 50,257, width 768, 12 layers, 12 heads),
randomly initialized: the weights do not change the cost. Recomputation is skipped for
contexts above ``--max-recompute`` (default 1024, 256 for gpt2-small on the CPU: one of its
steps at 1,024 costs seconds).

Timings depend on the machine and on what else runs on it: the load average is a column. The
CSV names the machine (``helpers.parallel.machine_label``) and the command.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time

import pandas as pd
import torch

from helpers.analysis import DispatchCounter
from helpers.gpt import GPT, GPTConfig
from helpers.parallel import machine_label

MODELS = {
    "chapter": dict(vocab_size=64, d_model=64, num_layers=2, num_heads=4),
    "gpt2-small": dict(
        vocab_size=50_257,
        d_model=768,
        num_layers=12,
        num_heads=12,
        norm="layer",
        bias=True,
        activation="gelu_tanh",
    ),  # fmt: skip
}
COLUMNS = [
    "model", "device", "mode", "context", "steps", "seconds_per_step", "ops_per_step",
    "non_view_ops_per_step", "syncs_per_step", "elements_written_per_step", "repeats",
    "load_average", "machine", "command",
]  # fmt: skip


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def _step_seconds(
    model: GPT, prompt: torch.Tensor, steps: int, use_cache: bool
) -> list[float]:
    """The wall time of each of ``steps`` greedy steps after ``prompt``, the prefill excluded.

    A step is what :meth:`GPT.generate`'s loop runs: the model on the new token (with the
    cache) or on the whole sequence (without), the arg-max, the write into the output.
    """
    device = prompt.device
    batch, context = prompt.shape
    tokens = prompt.new_zeros((batch, context + steps + 1))
    tokens[:, :context] = prompt
    caches = (
        model.new_caches(batch, capacity=context + steps + 1)
        if use_cache
        else None
    )
    # the prompt's pass: not timed
    logits = model(prompt, caches, validate=False)[:, -1]
    tokens[:, context : context + 1] = logits.argmax(dim=-1, keepdim=True)
    times = []
    for position in range(context + 1, context + steps + 1):
        _synchronize(device)
        start = time.perf_counter()
        if use_cache:
            logits = model(
                tokens[:, position - 1 : position], caches, validate=False
            )
        else:
            logits = model(tokens[:, :position], validate=False)
        tokens[:, position : position + 1] = logits[:, -1].argmax(
            dim=-1, keepdim=True
        )
        _synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def _counts(
    model: GPT, prompt: torch.Tensor, new: int, use_cache: bool
) -> DispatchCounter:
    with DispatchCounter() as counter:
        model.generate(prompt, new, greedy=True, use_cache=use_cache)
    return counter


def measure(
    model: GPT, context: int, steps: int, use_cache: bool, repeats: int
) -> dict:
    """Per-step time, operators, synchronizations and elements written at ``context``."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(context)
    prompt = torch.randint(
        model.vocab_size, (1, context), generator=generator
    ).to(device)
    _step_seconds(model, prompt, 2, use_cache)  # warm-up
    times = [
        t
        for _ in range(repeats)
        for t in _step_seconds(model, prompt, steps, use_cache)
    ]
    one, more = (
        _counts(model, prompt, 1, use_cache),
        _counts(model, prompt, 1 + steps, use_cache),
    )
    return {
        "seconds_per_step": statistics.median(times),
        "ops_per_step": (more.ops - one.ops) / steps,
        "non_view_ops_per_step": (more.non_view_ops - one.non_view_ops) / steps,
        "syncs_per_step": (more.syncs - one.syncs) / steps,
        "elements_written_per_step": (
            more.elements_written - one.elements_written
        )
        / steps,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (default 1)"
    )
    parser.add_argument(
        "--models", nargs="+", default=["chapter"], choices=list(MODELS)
    )
    parser.add_argument(
        "--contexts", nargs="+", type=int, default=[64, 256, 1024]
    )
    parser.add_argument(
        "--steps", type=int, default=16, help="decode steps measured per run"
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="runs per figure (median)"
    )
    parser.add_argument(
        "--max-recompute", type=int, default=None,
        help="longest context timed without the cache (default 1024; gpt2-small on CPU: 256)",
    )  # fmt: skip
    parser.add_argument(
        "--out", default=None, help="write the rows as CSV to this path"
    )
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("CUDA is not available here: nothing measured", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    command = "python scripts/bench_decode.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    machine = machine_label(str(device))
    print(f"{machine}; load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    for name in args.models:
        torch.manual_seed(0)
        context_length = max(args.contexts) + args.steps + 1
        model = (
            GPT(GPTConfig(context_length=context_length, **MODELS[name]))
            .to(device)
            .eval()
        )
        limit = args.max_recompute
        if limit is None:
            limit = (
                256 if name == "gpt2-small" and device.type == "cpu" else 1024
            )
        for context in args.contexts:
            for mode in ("cache", "no cache"):
                if mode == "no cache" and context > limit:
                    continue
                result = measure(
                    model, context, args.steps, mode == "cache", args.repeats
                )
                row = {"model": name, "device": device.type, "mode": mode, "context": context,
                       "steps": args.steps, **result, "repeats": args.repeats,
                       "load_average": round(os.getloadavg()[0], 2), "machine": machine,
                       "command": command}  # fmt: skip
                rows.append(row)
                print(
                    f"{name:>10} {mode:>8} L={context:<5} "
                    f"{1e3 * result['seconds_per_step']:9.3f} ms/step "
                    f"{result['ops_per_step']:6.1f} ops ({result['non_view_ops_per_step']:.1f} "
                    f"not views)/step {result['syncs_per_step']:4.1f} "
                    f"syncs/step {result['elements_written_per_step']:12.0f} elements/step",
                    flush=True,
                )
    table = pd.DataFrame(rows, columns=COLUMNS)
    for name, rows_of in table.groupby("model", sort=False):
        speed = rows_of.pivot(
            index="context", columns="mode", values="seconds_per_step"
        )
        if "no cache" in speed:
            ratio = (speed["no cache"] / speed["cache"]).dropna()
            ratios = ", ".join(
                f"{value:.1f}x at {context}" for context, value in ratio.items()
            )
            print(f"{name}: the cached step is faster by {ratios}")
    if args.out:
        table.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
