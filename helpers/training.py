"""The book's one training loop: plain PyTorch, readable top to bottom.

Every chapter that trains a model calls :func:`fit` and gets back a pandas DataFrame of its
history, so learning curves are one ``DataFrame.plot`` away and no chapter writes its own loop.

Batches are tuples ``(x_1, ..., x_n, target)``: the model is called as ``model(x_1, ..., x_n)``
and the loss as ``loss_fn(output, target)``. A ``DataLoader`` over a ``TensorDataset(x, y)``
gives exactly that. ``loss_fn`` must return the *mean* loss of a batch (PyTorch's default
``reduction="mean"``), so that averages over batches of different sizes are exact.

Metrics are a dict ``{"name": fn}`` with ``fn(output, target) -> scalar`` (a tensor or a float),
also a mean over the batch. Learning-rate schedulers are stepped after every optimizer step,
which is what per-step schedules such as :func:`cosine_warmup_schedule` expect.
"""

from __future__ import annotations

import math
import numbers
import os
import time
from collections.abc import Callable, Iterable, Mapping

import pandas as pd
import torch
from torch import nn
from tqdm import tqdm

__all__ = [
    "fit",
    "evaluate",
    "save_checkpoint",
    "load_checkpoint",
    "cosine_warmup_factor",
    "cosine_warmup_schedule",
]

Metric = Callable[[torch.Tensor, torch.Tensor], "torch.Tensor | float"]


# --- argument checks (shared by the public functions) -----------------------------------------


def _check_model(model) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module, got {type(model).__name__}; "
            "wrap plain functions in an nn.Module"
        )


def _check_loader(loader, name: str) -> None:
    if isinstance(loader, torch.Tensor) or not isinstance(loader, Iterable):
        raise TypeError(
            f"{name} must be an iterable of (inputs..., target) batches such as a "
            f"torch.utils.data.DataLoader, got {type(loader).__name__}; "
            "wrap tensors with DataLoader(TensorDataset(x, y), batch_size=...)"
        )


def _check_metrics(metrics) -> dict[str, Metric]:
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise TypeError(
            f"metrics must be a dict {{name: fn(output, target)}}, got {type(metrics).__name__}"
        )
    for name, metric in metrics.items():
        if not isinstance(name, str) or not name.isidentifier() or name == "loss":
            raise ValueError(
                f"metric names must be identifiers other than 'loss', got {name!r}; "
                "rename it, e.g. 'accuracy'"
            )
        if not callable(metric):
            raise TypeError(f"metric {name!r} must be callable, got {type(metric).__name__}")
    return dict(metrics)


def _resolve_device(model: nn.Module, device) -> torch.device:
    """The requested device, or the device of the model's first parameter (CPU if it has none)."""
    if device is not None:
        try:
            return torch.device(device)
        except (RuntimeError, TypeError) as error:
            raise ValueError(
                f"device must be a torch.device or a name such as 'cpu', 'cuda' or 'mps', "
                f"got {device!r} ({error})"
            ) from None
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


def _split_batch(batch, device: torch.device) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Move a batch ``(x_1, ..., x_n, target)`` to ``device``; return ``((x_1, ...), target)``."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        kind = type(batch).__name__
        raise TypeError(
            f"each batch must be a tuple (inputs..., target) of at least 2 tensors, got {kind}; "
            "build the loader on TensorDataset(inputs, targets)"
        )
    moved = [item.to(device, non_blocking=True) for item in batch]
    return tuple(moved[:-1]), moved[-1]


def _as_float(value) -> float:
    return value.item() if isinstance(value, torch.Tensor) else float(value)


# --- evaluation -------------------------------------------------------------------------------


def evaluate(
    model: nn.Module,
    loader: Iterable,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    metrics: Mapping[str, Metric] | None = None,
    device: torch.device | str | None = None,
) -> dict[str, float]:
    """Mean loss and metrics of ``model`` over every batch of ``loader``, without gradients.

    Returns ``{"loss": ..., "<metric>": ...}``: sample-weighted means over the loader, so a
    smaller last batch counts for what it holds. The model is put in ``eval()`` mode (dropout
    off) and given back in the mode it was in. ``device=None`` uses the model's own device.
    """
    _check_model(model)
    _check_loader(loader, "loader")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    metrics = _check_metrics(metrics)
    device = _resolve_device(model, device)
    model.to(device)

    was_training = model.training
    model.eval()
    totals = dict.fromkeys(["loss", *metrics], 0.0)
    num_samples = 0
    with torch.no_grad():
        for batch in loader:
            inputs, target = _split_batch(batch, device)
            output = model(*inputs)
            size = target.shape[0]
            totals["loss"] += _as_float(loss_fn(output, target)) * size
            for name, metric in metrics.items():
                totals[name] += _as_float(metric(output, target)) * size
            num_samples += size
    model.train(was_training)
    if num_samples == 0:
        raise ValueError("loader yielded no batches; check its dataset and batch_size")
    return {name: total / num_samples for name, total in totals.items()}


# --- training ---------------------------------------------------------------------------------


def fit(
    model: nn.Module,
    train_loader: Iterable,
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    epochs: int,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    val_loader: Iterable | None = None,
    metrics: Mapping[str, Metric] | None = None,
    clip_grad_norm: float | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
    log_every: int = 10,
    seed: int | None = None,
) -> pd.DataFrame:
    """Train ``model`` for ``epochs`` passes over ``train_loader``; return the history.

    One optimizer step per batch: forward, ``loss_fn``, backward, optional gradient clipping
    (``clip_grad_norm``: the max global L2 norm), ``optimizer.step()``, then ``scheduler.step()``.
    ``device=None`` trains where the model already is; otherwise the model is moved there.
    ``seed`` (optional) seeds torch first, for dropout and for loaders that shuffle with the
    global generator. ``progress`` shows one tqdm bar; notebooks in the book pass ``False``.

    The history has one row per logged step: every ``log_every`` steps and always at the last
    step of an epoch. Columns:

    - ``epoch`` (1-based) and ``step`` (optimizer steps so far, 1-based);
    - ``lr``: the learning rate of the first parameter group used for that step;
    - ``train_loss`` and ``train_<metric>``: the means over the steps since the previous row;
    - ``val_loss`` and ``val_<metric>``: :func:`evaluate` on ``val_loader``, only in the last
      row of each epoch (NaN elsewhere; absent without a ``val_loader``). Per-epoch values:
      ``history.dropna(subset=["val_loss"])``;
    - ``elapsed_s``: wall-clock seconds since the start of training (volatile).
    """
    _check_model(model)
    _check_loader(train_loader, "train_loader")
    if val_loader is not None:
        _check_loader(val_loader, "val_loader")
    if not callable(loss_fn):
        raise TypeError(
            f"loss_fn must be callable, e.g. nn.MSELoss(), got {type(loss_fn).__name__}"
        )
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}; "
            "e.g. torch.optim.AdamW(model.parameters(), lr=1e-3)"
        )
    for name, value in (("epochs", epochs), ("log_every", log_every)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if clip_grad_norm is not None and (
        not isinstance(clip_grad_norm, numbers.Real)
        or isinstance(clip_grad_norm, bool)
        or not clip_grad_norm > 0
    ):
        raise ValueError(
            f"clip_grad_norm must be a positive number or None, got {clip_grad_norm!r}; "
            "1.0 is a common choice"
        )
    if scheduler is not None and not callable(getattr(scheduler, "step", None)):
        raise TypeError(
            f"scheduler must have a step() method (a torch LR scheduler), "
            f"got {type(scheduler).__name__}"
        )
    metrics = _check_metrics(metrics)
    if seed is not None:
        torch.manual_seed(seed)
    device = _resolve_device(model, device)
    model.to(device)

    rows: list[dict[str, float]] = []
    sums = dict.fromkeys(["loss", *metrics], 0.0)
    steps_since_log = 0
    step = 0
    start = time.perf_counter()
    try:
        steps_per_epoch = len(train_loader)  # type: ignore[arg-type]
    except TypeError:
        steps_per_epoch = None
    total = steps_per_epoch * epochs if steps_per_epoch is not None else None
    bar = tqdm(total=total, disable=not progress, unit="step", dynamic_ncols=True)

    model.train()
    for epoch in range(1, epochs + 1):
        batches = iter(train_loader)
        batch = next(batches, None)
        if batch is None:
            bar.close()
            raise ValueError("train_loader yielded no batches; check its dataset and batch_size")
        while batch is not None:
            inputs, target = _split_batch(batch, device)
            lr = optimizer.param_groups[0]["lr"]
            output = model(*inputs)
            loss = loss_fn(output, target)
            if not torch.isfinite(loss):
                bar.close()
                raise FloatingPointError(
                    f"the training loss is {loss.item()} at epoch {epoch}, step {step + 1}; "
                    "lower the learning rate, clip gradients (clip_grad_norm=1.0) "
                    "or check the data for NaNs"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip_grad_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            step += 1

            sums["loss"] += loss.item()
            with torch.no_grad():
                for name, metric in metrics.items():
                    sums[name] += _as_float(metric(output, target))
            steps_since_log += 1
            bar.update(1)

            batch = next(batches, None)
            end_of_epoch = batch is None
            if step % log_every == 0 or end_of_epoch:
                row = {"epoch": epoch, "step": step, "lr": lr}
                row.update({f"train_{name}": s / steps_since_log for name, s in sums.items()})
                if end_of_epoch and val_loader is not None:
                    scores = evaluate(model, val_loader, loss_fn, metrics, device)
                    row.update({f"val_{name}": value for name, value in scores.items()})
                row["elapsed_s"] = time.perf_counter() - start
                rows.append(row)
                bar.set_postfix(loss=f"{row['train_loss']:.4g}", epoch=epoch)
                sums = dict.fromkeys(sums, 0.0)
                steps_since_log = 0
    bar.close()

    columns = ["epoch", "step", "lr", "train_loss", *(f"train_{name}" for name in metrics)]
    if val_loader is not None:
        columns += ["val_loss", *(f"val_{name}" for name in metrics)]
    columns.append("elapsed_s")
    history = pd.DataFrame(rows, columns=columns)
    return history.astype({"epoch": "int64", "step": "int64"})


# --- checkpoints ------------------------------------------------------------------------------


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    **extra,
) -> None:
    """Save the model's (and optionally the optimizer's) state and any ``extra`` values.

    ``extra`` holds plain values (numbers, strings, lists, dicts, tensors), e.g. ``epoch=5``;
    they come back from :func:`load_checkpoint`, which loads with ``weights_only=True`` (safe
    for files from others), so arbitrary Python objects such as DataFrames are refused there.
    """
    _check_model(model)
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    state = {"model": model.state_dict(), "extra": extra}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    torch.save(state, path)


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
) -> dict:
    """Load a :func:`save_checkpoint` file into ``model`` (and ``optimizer``); return the extras.

    Tensors are mapped to the model's current device, so a checkpoint saved on a GPU loads on
    a CPU-only machine.
    """
    _check_model(model)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {os.fspath(path)!r}; check the path")
    state = torch.load(path, map_location=_resolve_device(model, None), weights_only=True)
    if not isinstance(state, dict) or "model" not in state:
        raise ValueError(f"{os.fspath(path)!r} is not a checkpoint written by save_checkpoint")
    model.load_state_dict(state["model"])
    if optimizer is not None:
        if "optimizer" not in state:
            raise ValueError(
                f"{os.fspath(path)!r} holds no optimizer state; "
                "save it with save_checkpoint(path, model, optimizer) or load without optimizer"
            )
        optimizer.load_state_dict(state["optimizer"])
    return state["extra"]


# --- learning-rate schedule -------------------------------------------------------------------


def _check_schedule(warmup_steps, total_steps) -> None:
    for name, value in (("warmup_steps", warmup_steps), ("total_steps", total_steps)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(
            f"warmup_steps must be in [0, total_steps={total_steps}], got {warmup_steps}; "
            "a few percent of total_steps is usual"
        )


def cosine_warmup_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """The learning-rate multiplier at optimizer step ``step`` (0-based).

    Linear warm-up ``(step + 1) / warmup_steps`` over the first ``warmup_steps`` steps (so the
    first step already learns and step ``warmup_steps - 1`` reaches 1), then a cosine decay
    from 1 at ``step = warmup_steps`` to 0 at ``step = total_steps``; 0 after that.
    """
    _check_schedule(warmup_steps, total_steps)
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if step >= total_steps:
        return 0.0
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def cosine_warmup_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` scaling each group's learning rate by :func:`cosine_warmup_factor`.

    Call ``scheduler.step()`` after every ``optimizer.step()`` (as :func:`fit` does);
    ``total_steps`` is then ``epochs * len(train_loader)``.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    _check_schedule(warmup_steps, total_steps)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: cosine_warmup_factor(step, warmup_steps, total_steps)
    )
