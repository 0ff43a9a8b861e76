"""The book's one training loop: plain PyTorch, readable top to bottom.

Every chapter that trains a model calls :func:`fit` and gets back a pandas
DataFrame of its history, so learning curves are one ``DataFrame.plot`` away and
no chapter writes its own loop.

Batches are tuples ``(x_1, ..., x_n, target)``: the model is called as
``model(x_1, ..., x_n)`` and the loss as ``loss_fn(output, target)``. A
``DataLoader`` over a ``TensorDataset(x, y)`` gives exactly that. ``loss_fn``
must return the *mean* loss of a batch (PyTorch's default ``reduction="mean"``),
so that averages over batches of different sizes are exact.

Metrics are a dict ``{"name": fn}`` with ``fn(output, target) -> scalar`` (a
tensor or a float), also a mean over the batch. Learning-rate schedulers are
stepped after every optimizer step, which is what per-step schedules such as
:func:`cosine_warmup_schedule` expect.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from helpers import _validate as check

__all__ = [
    "token_cross_entropy",
    "fit",
    "evaluate",
    "save_checkpoint",
    "load_checkpoint",
    "cosine_warmup_factor",
    "cosine_warmup_schedule",
    "shuffled_loader",
    "adamw_cosine",
]

Metric = Callable[[torch.Tensor, torch.Tensor], "torch.Tensor | float"]


def token_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Mean cross-entropy over every token: logits ``(B, T, C)``, targets ``(B,
    T)``.

    The loss of every sequence model of the book: chapter 7 labels each token,
    chapters 10 to 12 predict the next one (``targets[b, t]`` is the token
    after position ``t``). Targets equal to -100 (PyTorch's ``ignore_index``) do
    not count.
    """
    check.logits_targets(logits, targets)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _resolve_device(model: nn.Module, device) -> torch.device:
    """The requested device, or the device of the model's first parameter (CPU
    if it has none)."""
    if device is not None:
        try:
            return torch.device(device)
        except (RuntimeError, TypeError) as error:
            raise ValueError(
                "device must be a torch.device or a name such as 'cpu', "
                "'cuda' or 'mps', "
                f"got {device!r} ({error})"
            ) from None
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


def _split_batch(
    batch, device: torch.device
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Move a batch ``(x_1, ..., x_n, target)`` to ``device``; return ``((x_1,
    ...), target)``."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        kind = type(batch).__name__
        raise TypeError(
            "each batch must be a tuple (inputs..., target) of at least 2 "
            f"tensors, got {kind}; "
            "build the loader on TensorDataset(inputs, targets)"
        )
    moved = [item.to(device, non_blocking=True) for item in batch]
    return tuple(moved[:-1]), moved[-1]


def _as_float(value) -> float:
    return value.item() if isinstance(value, torch.Tensor) else float(value)


# --- evaluation ---------------------------------------------------------------


def evaluate(
    model: nn.Module,
    loader: Iterable,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    metrics: Mapping[str, Metric] | None = None,
    device: torch.device | str | None = None,
) -> dict[str, float]:
    """Mean loss and metrics of ``model`` over every batch of ``loader``,
    without gradients.

    Returns ``{"loss": ..., "<metric>": ...}``: sample-weighted means over the
    loader, so a smaller last batch counts for what it holds. The model is put
    in ``eval()`` mode (dropout off) and given back in the mode it was in.
    ``device=None`` uses the model's own device.
    """
    check.module(model)
    check.loader("loader", loader)
    check.loss_function(loss_fn)
    check.metric_functions(metrics)
    metrics = {} if metrics is None else dict(metrics)
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
            check.model_output(output)
            size = target.shape[0]
            totals["loss"] += _as_float(loss_fn(output, target)) * size
            for name, metric in metrics.items():
                totals[name] += _as_float(metric(output, target)) * size
            num_samples += size
    model.train(was_training)
    if num_samples == 0:
        raise ValueError(
            "loader yielded no batches; check its dataset and batch_size"
        )
    return {name: total / num_samples for name, total in totals.items()}


# --- training -----------------------------------------------------------------


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
    """Train ``model`` for ``epochs`` passes over ``train_loader``.

    Returns the history (a DataFrame, described below).

    One optimizer step per batch: forward, ``loss_fn``, backward, optional
    gradient clipping (``clip_grad_norm``: the max global L2 norm),
    ``optimizer.step()``, then ``scheduler.step()``. ``device=None`` trains
    where the model already is; otherwise the model is moved there. ``seed``
    (optional) seeds torch first, for dropout and for loaders that shuffle with
    the global generator. ``progress`` shows one tqdm bar; notebooks in the book
    pass ``False``.

    The history has one row per logged step: every ``log_every`` steps and
    always at the last step of an epoch. Columns: ``epoch`` (1-based), ``step``
    (optimizer steps so far), ``lr`` (used for that step), ``train_loss`` and
    ``train_<metric>`` (means over the steps since the previous row),
    ``val_loss`` and ``val_<metric>`` (:func:`evaluate` on ``val_loader`` in the
    last row of each epoch, NaN elsewhere), ``elapsed_s`` (wall-clock seconds,
    volatile).
    """
    _check_fit_arguments(
        model=model,
        train_loader=train_loader,
        val_loader=val_loader,
        loss_fn=loss_fn,
        optimizer=optimizer,
        epochs=epochs,
        scheduler=scheduler,
        metrics=metrics,
        clip_grad_norm=clip_grad_norm,
        log_every=log_every,
        seed=seed,
    )
    metrics = {} if metrics is None else dict(metrics)
    if seed is not None:
        torch.manual_seed(seed)
    device = _resolve_device(model, device)
    model.to(device)
    model.train()
    with _Log(
        metrics, total=_num_steps(train_loader, epochs), progress=progress
    ) as log:
        for epoch in range(1, epochs + 1):
            batches = iter(train_loader)
            batch = next(batches, None)
            _check_first_batch(batch)
            while batch is not None:
                inputs, target = _split_batch(batch, device)
                lr = optimizer.param_groups[0]["lr"]
                output = model(*inputs)
                check.model_output(output)
                loss = loss_fn(output, target)
                _check_finite_loss(loss, epoch, log.step + 1)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if clip_grad_norm is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                log.add(loss, output, target)
                batch = next(batches, None)
                # the epoch's end: validate
                if batch is None and val_loader is not None:
                    log.row(
                        epoch,
                        lr,
                        evaluate(model, val_loader, loss_fn, metrics, device),
                    )
                elif log.step % log_every == 0 or batch is None:
                    log.row(epoch, lr, None)
    return log.history(validation=val_loader is not None)


class _Log:
    """The running sums behind :func:`fit`'s history, and its progress bar."""

    def __init__(
        self, metrics: dict[str, Metric], total: int | None, progress: bool
    ):
        self.metrics, self.rows, self.step = metrics, [], 0
        self.sums, self.count = dict.fromkeys(["loss", *metrics], 0.0), 0
        self.start = time.perf_counter()
        self.bar = tqdm(
            total=total, disable=not progress, unit="step", dynamic_ncols=True
        )

    def add(
        self, loss: torch.Tensor, output: torch.Tensor, target: torch.Tensor
    ) -> None:
        self.sums["loss"] += loss.item()
        with torch.no_grad():
            for name, metric in self.metrics.items():
                self.sums[name] += _as_float(metric(output, target))
        self.step, self.count = self.step + 1, self.count + 1
        self.bar.update(1)

    def row(
        self, epoch: int, lr: float, scores: dict[str, float] | None
    ) -> None:
        row = {"epoch": epoch, "step": self.step, "lr": lr}
        row.update(
            {f"train_{name}": s / self.count for name, s in self.sums.items()}
        )
        row.update(
            {f"val_{name}": value for name, value in (scores or {}).items()}
        )
        row["elapsed_s"] = time.perf_counter() - self.start
        self.rows.append(row)
        self.bar.set_postfix(loss=f"{row['train_loss']:.4g}", epoch=epoch)
        self.sums, self.count = dict.fromkeys(self.sums, 0.0), 0

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> _Log:
        return self

    # also when training stops on an error
    def __exit__(self, *exc_info) -> None:
        self.close()

    def history(self, validation: bool) -> pd.DataFrame:
        self.close()
        names = ["loss", *self.metrics]
        columns = ["epoch", "step", "lr", *(f"train_{name}" for name in names)]
        if validation:
            columns += [f"val_{name}" for name in names]
        history = pd.DataFrame(self.rows, columns=[*columns, "elapsed_s"])
        return history.astype({"epoch": "int64", "step": "int64"})


def _num_steps(loader: Iterable, epochs: int) -> int | None:
    try:
        return len(loader) * epochs  # type: ignore[arg-type]
    except TypeError:
        return None


# --- checkpoints --------------------------------------------------------------


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    **extra,
) -> None:
    """Save the model's (and optionally the optimizer's) state and any ``extra``
    values.

    ``extra`` holds plain values (numbers, strings, lists, dicts, tensors), e.g.
    ``epoch=5``; they come back from :func:`load_checkpoint`, which loads with
    ``weights_only=True`` (safe for files from others), so arbitrary Python
    objects such as DataFrames are refused there.
    """
    check.module(model)
    if optimizer is not None:
        check.optimizer_of(optimizer)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"path must be a str or os.PathLike, got {type(path).__name__}"
        )
    state = {"model": model.state_dict(), "extra": extra}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    torch.save(state, path)


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
) -> dict:
    """Load a :func:`save_checkpoint` file into ``model`` (and ``optimizer``);
    return the extras.

    Tensors are mapped to the model's current device, so a checkpoint saved on a
    GPU loads on a CPU-only machine.
    """
    check.module(model)
    if optimizer is not None:
        check.optimizer_of(optimizer)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"no checkpoint at {os.fspath(path)!r}; check the path"
        )
    state = torch.load(
        path, map_location=_resolve_device(model, None), weights_only=True
    )
    if not isinstance(state, dict) or "model" not in state:
        raise ValueError(
            f"{os.fspath(path)!r} is not a checkpoint written "
            "by save_checkpoint"
        )
    model.load_state_dict(state["model"])
    if optimizer is not None:
        if "optimizer" not in state:
            raise ValueError(
                f"{os.fspath(path)!r} holds no optimizer state; "
                "save it with save_checkpoint(path, model, optimizer) or load "
                "without optimizer"
            )
        optimizer.load_state_dict(state["optimizer"])
    return state["extra"]


# --- learning-rate schedule ---------------------------------------------------


def cosine_warmup_factor(
    step: int, warmup_steps: int, total_steps: int
) -> float:
    """The learning-rate multiplier at optimizer step ``step`` (0-based).

    Linear warm-up ``(step + 1) / warmup_steps`` over the first ``warmup_steps``
    steps (so the first step already learns and step ``warmup_steps - 1``
    reaches 1), then a cosine decay from 1 at ``step = warmup_steps`` to 0 at
    ``step = total_steps``; 0 after that.
    """
    _check_step(step, warmup_steps, total_steps)
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if step >= total_steps:
        return 0.0
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def cosine_warmup_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` scaling each group's learning rate by
    :func:`cosine_warmup_factor`.

    Call ``scheduler.step()`` after every ``optimizer.step()`` (as :func:`fit`
    does); ``total_steps`` is then ``epochs * len(train_loader)``.
    """
    check.optimizer_of(optimizer)
    check.schedule(warmup_steps, total_steps)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: cosine_warmup_factor(step, warmup_steps, total_steps),
    )


def shuffled_loader(
    dataset, batch_size: int, seed: int, drop_last: bool = True
) -> DataLoader:
    """The training loader of every task: ``batch_size`` examples at a time in
    an order drawn from ``seed`` alone (its own generator: what else draws
    random numbers does not change it), the last short batch dropped unless
    ``drop_last=False``."""
    check.positive_int("batch_size", batch_size)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(seed),
    )


def adamw_cosine(
    model: nn.Module,
    lr: float,
    warmup_steps: int,
    total_steps: int,
    weight_decay: float = 0.01,
    *,
    decay: bool = True,
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW on every parameter of ``model`` (``weight_decay``: AdamW's own
    default unless given; 0 is Adam) and its :func:`cosine_warmup_schedule`:
    the optimizer of every training task in the book. ``decay=False`` keeps
    the rate constant after the warm-up instead (chapter 7's schedule
    experiment)."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=lr, weight_decay=weight_decay
    )
    if decay:
        return optimizer, cosine_warmup_schedule(
            optimizer, warmup_steps, total_steps
        )
    check.schedule(warmup_steps, total_steps)
    warmup = max(warmup_steps, 1)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup)
    )


# ------------------------------------------------------------ this module's checks
# Each has one caller, above; the generic checks are in helpers._validate.


def _check_fit_arguments(
    *,
    model,
    train_loader,
    val_loader,
    loss_fn,
    optimizer,
    epochs,
    scheduler,
    metrics,
    clip_grad_norm,
    log_every,
    seed,
) -> None:
    """The arguments of :func:`helpers.training.fit`, by keyword."""
    check.module(model)
    check.loader("train_loader", train_loader)
    if val_loader is not None:
        check.loader("val_loader", val_loader)
    check.loss_function(loss_fn)
    check.optimizer_of(optimizer, for_model=model)
    check.positive_int("epochs", epochs)
    check.positive_int("log_every", log_every)
    if clip_grad_norm is not None:
        check.positive_number(
            "clip_grad_norm", clip_grad_norm, "1.0 is a common choice"
        )
    if scheduler is not None and not callable(getattr(scheduler, "step", None)):
        raise TypeError(
            f"scheduler must have a step() method (a torch LR scheduler), "
            f"got {type(scheduler).__name__}"
        )
    if seed is not None:
        check.non_negative_int("seed", seed)
    check.metric_functions(metrics)


def _check_step(step: int, warmup_steps: int, total_steps: int) -> None:
    """A step of :func:`cosine_warmup_factor` and its schedule."""
    check.schedule(warmup_steps, total_steps)
    check.non_negative_int("step", step)


def _check_first_batch(batch) -> None:
    """The first batch of an epoch, which must exist: a loader that yields
    nothing is an error."""
    if batch is None:
        raise ValueError(
            "train_loader yielded no batches; check its dataset and batch_size"
        )


def _check_finite_loss(loss: torch.Tensor, epoch: int, step: int) -> None:
    """A training loss that is a finite number (not NaN, not infinite), or a
    clear error."""
    if not torch.isfinite(loss):
        raise FloatingPointError(
            f"the training loss is {loss.item()} at epoch {epoch}, step "
            f"{step}; lower the learning rate, clip gradients "
            "(clip_grad_norm=1.0) or check the data for NaNs"
        )
