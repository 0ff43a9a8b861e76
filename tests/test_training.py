"""Tests of helpers.training: the loop learns, its history is what the docstring says, the
checkpoint round trip is exact, the schedule has its documented values, and errors teach."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.training import (
    cosine_warmup_factor,
    cosine_warmup_schedule,
    evaluate,
    fit,
    load_checkpoint,
    save_checkpoint,
)


def linear_problem(num_samples: int = 64, batch_size: int = 16, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, 3, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size)
    torch.manual_seed(seed)
    return nn.Linear(3, 1), loader


def train(model, loader, optimizer, **options):
    """``fit`` on the mean squared error, without a progress bar, as most tests here train."""
    return fit(
        model,
        loader,
        loss_fn=nn.MSELoss(),
        optimizer=optimizer,
        progress=False,
        **options,
    )


def mean_abs_error(output, target):
    return (output - target).abs().mean()


def test_loss_decreases_on_a_tiny_problem():
    model, loader = linear_problem()
    before = evaluate(model, loader, nn.MSELoss())["loss"]
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    history = train(model, loader, optimizer, epochs=30)
    after = evaluate(model, loader, nn.MSELoss())["loss"]
    assert after < 0.01 * before
    assert history["train_loss"].iloc[-1] < history["train_loss"].iloc[0]


def test_history_columns_and_rows():
    model, loader = linear_problem(
        num_samples=70, batch_size=16
    )  # 5 batches, the last of 6
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    history = train(
        model,
        loader,
        optimizer,
        epochs=2,
        val_loader=loader,
        metrics={"mae": mean_abs_error},
        log_every=2,
    )
    assert list(history.columns) == [
        "epoch",
        "step",
        "lr",
        "train_loss",
        "train_mae",
        "val_loss",
        "val_mae",
        "elapsed_s",
    ]
    # Steps 2 and 4, then 5 (end of epoch 1), then 6, 8 and 10 (end of epoch 2).
    assert history["step"].tolist() == [2, 4, 5, 6, 8, 10]
    assert history["epoch"].tolist() == [1, 1, 1, 2, 2, 2]
    per_epoch = history.dropna(subset=["val_loss"])
    assert per_epoch["step"].tolist() == [5, 10]
    assert history["val_loss"].isna().sum() == 4
    assert (history["lr"] == 0.01).all()
    assert history["elapsed_s"].is_monotonic_increasing
    final = evaluate(model, loader, nn.MSELoss(), {"mae": mean_abs_error})
    assert per_epoch["val_loss"].iloc[-1] == pytest.approx(final["loss"])
    assert per_epoch["val_mae"].iloc[-1] == pytest.approx(final["mae"])


def test_history_without_val_loader_has_no_val_columns():
    model, loader = linear_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    history = train(model, loader, optimizer, epochs=1)
    assert list(history.columns) == [
        "epoch",
        "step",
        "lr",
        "train_loss",
        "elapsed_s",
    ]
    assert (
        len(history) == 1
    )  # 4 steps < log_every=10: only the end of the epoch is logged


def test_train_loss_is_the_mean_over_the_logged_steps():
    # With lr=0 the model never changes, so each logged value is a plain mean of batch losses.
    model, loader = linear_problem(num_samples=64, batch_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    history = train(model, loader, optimizer, epochs=1, log_every=2)
    with torch.no_grad():
        batch_losses = [
            nn.functional.mse_loss(model(x), y).item() for x, y in loader
        ]
    expected = [np.mean(batch_losses[:2]), np.mean(batch_losses[2:])]
    np.testing.assert_allclose(history["train_loss"], expected, rtol=1e-6)


def test_fit_is_reproducible_with_a_seed():
    def run():
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.5), nn.Linear(8, 1))
        _, loader = linear_problem()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        return train(model, loader, optimizer, epochs=3, seed=7)

    first, second = run(), run()
    pd.testing.assert_series_equal(first["train_loss"], second["train_loss"])


def test_scheduler_is_stepped_once_per_optimizer_step():
    model, loader = linear_problem(
        num_samples=64, batch_size=8
    )  # 8 steps per epoch
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = cosine_warmup_schedule(
        optimizer, warmup_steps=4, total_steps=16
    )
    history = train(
        model, loader, optimizer, epochs=2, scheduler=scheduler, log_every=1
    )
    expected = [0.1 * cosine_warmup_factor(step, 4, 16) for step in range(16)]
    np.testing.assert_allclose(history["lr"], expected, rtol=1e-12)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0)


def test_gradient_clipping_bounds_the_update():
    # With SGD, lr=1 and clipping at 0.01, one step moves the parameters by at most 0.01.
    model, loader = linear_problem(num_samples=16, batch_size=16)
    before = torch.cat(
        [p.detach().flatten().clone() for p in model.parameters()]
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    train(model, loader, optimizer, epochs=1, clip_grad_norm=0.01)
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert (after - before).norm() == pytest.approx(0.01, rel=1e-4)


def test_models_with_several_inputs_are_called_with_all_of_them():
    class AddThenLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 1)

        def forward(self, left, right):
            return self.linear(left + right)

    left, right = torch.randn(32, 2), torch.randn(32, 2)
    target = (left + right).sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(left, right, target), batch_size=8)
    model = AddThenLinear()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    train(model, loader, optimizer, epochs=40)
    assert evaluate(model, loader, nn.MSELoss())["loss"] < 1e-3


def test_evaluate_weights_batches_by_their_size_and_restores_the_mode():
    model, _ = linear_problem()
    x, y = torch.randn(10, 3), torch.randn(10, 1)
    uneven = DataLoader(
        TensorDataset(x, y), batch_size=4
    )  # batches of 4, 4 and 2
    model.train()
    scores = evaluate(model, uneven, nn.MSELoss(), {"mae": mean_abs_error})
    with torch.no_grad():
        assert scores["loss"] == pytest.approx(
            nn.functional.mse_loss(model(x), y).item()
        )
        assert scores["mae"] == pytest.approx(
            mean_abs_error(model(x), y).item()
        )
    assert model.training


def test_checkpoint_round_trip(tmp_path):
    model, loader = linear_problem()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    train(model, loader, optimizer, epochs=2)
    path = tmp_path / "model.pt"
    save_checkpoint(path, model, optimizer, epoch=2, note="after two epochs")

    fresh, _ = linear_problem(seed=123)
    fresh_optimizer = torch.optim.Adam(fresh.parameters(), lr=0.01)
    extra = load_checkpoint(path, fresh, fresh_optimizer)
    assert extra == {"epoch": 2, "note": "after two epochs"}
    for saved, loaded in zip(
        model.state_dict().values(), fresh.state_dict().values(), strict=True
    ):
        assert torch.equal(saved, loaded)
    saved_state = optimizer.state_dict()["state"]
    loaded_state = fresh_optimizer.state_dict()["state"]
    for key in saved_state:
        assert torch.equal(
            saved_state[key]["exp_avg"], loaded_state[key]["exp_avg"]
        )


def test_checkpoint_errors(tmp_path):
    model, _ = linear_problem()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt", model)
    path = tmp_path / "model_only.pt"
    save_checkpoint(path, model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="no optimizer state"):
        load_checkpoint(path, model, optimizer)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(ValueError, match="not a checkpoint"):
        load_checkpoint(other, model)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        save_checkpoint(path, "not a model")
    with pytest.raises(TypeError, match="Optimizer"):
        save_checkpoint(path, model, optimizer="adam")
    with pytest.raises(TypeError, match="path"):
        save_checkpoint(3, model)


def test_schedule_values_at_key_steps():
    warmup, total = 10, 110
    assert cosine_warmup_factor(0, warmup, total) == pytest.approx(0.1)
    assert cosine_warmup_factor(4, warmup, total) == pytest.approx(0.5)
    assert cosine_warmup_factor(9, warmup, total) == pytest.approx(1.0)
    assert cosine_warmup_factor(10, warmup, total) == pytest.approx(1.0)
    assert cosine_warmup_factor(60, warmup, total) == pytest.approx(0.5)
    assert cosine_warmup_factor(110, warmup, total) == 0.0
    assert cosine_warmup_factor(500, warmup, total) == 0.0
    assert cosine_warmup_factor(0, 0, 4) == pytest.approx(1.0)
    assert cosine_warmup_factor(2, 0, 4) == pytest.approx(0.5)
    assert (
        cosine_warmup_factor(4, 4, 4) == 0.0
    )  # warm-up only: no division by zero


@settings(max_examples=50, deadline=None)
@given(
    total=st.integers(min_value=1, max_value=500),
    warmup_fraction=st.floats(min_value=0.0, max_value=1.0),
    data=st.data(),
)
def test_schedule_is_in_unit_interval_and_decays_after_warmup(
    total, warmup_fraction, data
):
    warmup = int(warmup_fraction * total)
    step = data.draw(st.integers(min_value=0, max_value=2 * total))
    factor = cosine_warmup_factor(step, warmup, total)
    assert 0.0 <= factor <= 1.0
    if warmup <= step < total:
        assert factor >= cosine_warmup_factor(step + 1, warmup, total)
    if step < warmup:
        assert (
            factor < cosine_warmup_factor(step + 1, warmup, total)
            or step + 1 == warmup
        )


def test_schedule_drives_the_optimizer():
    parameter = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=2.0)
    scheduler = cosine_warmup_schedule(optimizer, warmup_steps=2, total_steps=6)
    seen = []
    for _ in range(7):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    expected = [2.0 * cosine_warmup_factor(step, 2, 6) for step in range(7)]
    np.testing.assert_allclose(seen, expected)
    assert math.isclose(seen[0], 1.0) and seen[-1] == 0.0


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (
            (0, 2, 10.0),
            TypeError,
            "total_steps must be a positive int, got float",
        ),
        ((0, 2, 0), ValueError, "total_steps must be a positive int, got 0"),
        (
            (0, 11, 10),
            ValueError,
            r"warmup_steps must be in \[0, total_steps=10\]",
        ),
        ((0, -1, 10), ValueError, "warmup_steps must be >= 0, got -1"),
        (
            (0, 2.0, 10),
            TypeError,
            "warmup_steps must be a non-negative int, got float",
        ),
        ((-1, 2, 10), ValueError, "step must be >= 0, got -1"),
        ((True, 2, 10), TypeError, "step must be a non-negative int, got bool"),
        ((1.0, 2, 10), TypeError, "step must be a non-negative int, got float"),
    ],
)
def test_schedule_errors(args, error, match):
    with pytest.raises(error, match=match):
        cosine_warmup_factor(*args)


def test_schedule_rejects_a_non_optimizer():
    with pytest.raises(TypeError, match="Optimizer"):
        cosine_warmup_schedule("adam", 1, 10)
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="warmup_steps"):
        cosine_warmup_schedule(optimizer, 20, 10)


def fit_kwargs(**overrides):
    model, loader = linear_problem()
    kwargs = {
        "model": model,
        "train_loader": loader,
        "loss_fn": nn.MSELoss(),
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.01),
        "epochs": 1,
        "progress": False,
    }
    kwargs.update(overrides)
    return kwargs


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        ({"model": "linear"}, TypeError, "model must be a torch.nn.Module"),
        (
            {"train_loader": torch.zeros(4, 3)},
            TypeError,
            "train_loader must be an iterable",
        ),
        ({"val_loader": 5}, TypeError, "val_loader must be an iterable"),
        ({"loss_fn": "mse"}, TypeError, "loss_fn must be callable"),
        (
            {"optimizer": "adam"},
            TypeError,
            "optimizer must be a torch.optim.Optimizer",
        ),
        ({"epochs": 0}, ValueError, "epochs must be a positive int"),
        (
            {"epochs": 2.0},
            TypeError,
            "epochs must be a positive int, got float",
        ),
        ({"log_every": 0}, ValueError, "log_every must be a positive int"),
        (
            {"clip_grad_norm": 0.0},
            ValueError,
            "clip_grad_norm must be > 0.*1.0 is a common",
        ),
        (
            {"clip_grad_norm": "1"},
            TypeError,
            "clip_grad_norm must be a number, got str",
        ),
        (
            {"log_every": 2.0},
            TypeError,
            "log_every must be a positive int, got float",
        ),
        ({"seed": -1}, ValueError, "seed must be >= 0"),
        (
            {"seed": 1.5},
            TypeError,
            "seed must be a non-negative int, got float",
        ),
        ({"scheduler": "cosine"}, TypeError, "scheduler must have a step"),
        ({"metrics": [mean_abs_error]}, TypeError, "metrics must be a dict"),
        (
            {"metrics": {"loss": mean_abs_error}},
            ValueError,
            "other than 'loss'",
        ),
        ({"metrics": {"mae": 3}}, TypeError, "metric 'mae' must be callable"),
        (
            {"device": "gpu0"},
            ValueError,
            "device must be a torch.device or a name",
        ),
        (
            {"train_loader": [torch.zeros(4, 3)]},
            TypeError,
            "each batch must be a tuple",
        ),
        ({"train_loader": []}, ValueError, "train_loader yielded no batches"),
    ],
)
def test_fit_errors(overrides, error, match):
    with pytest.raises(error, match=match):
        fit(**fit_kwargs(**overrides))


def test_fit_stops_on_a_non_finite_loss():
    x = torch.tensor([[1.0], [float("nan")]])
    loader = DataLoader(TensorDataset(x, torch.zeros(2, 1)), batch_size=2)
    model = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(
        FloatingPointError, match="the training loss is nan at epoch 1, step 1"
    ):
        fit(**fit_kwargs(train_loader=loader, model=model, optimizer=optimizer))


def test_evaluate_errors():
    model, loader = linear_problem()
    with pytest.raises(ValueError, match="loader yielded no batches"):
        evaluate(model, [], nn.MSELoss())
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        evaluate(model, loader, None)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        evaluate(None, loader, nn.MSELoss())


def test_progress_bar_can_be_shown(capsys):
    fit(**fit_kwargs(progress=True))
    assert "step" in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fit_moves_model_and_batches_to_cuda():
    kwargs = fit_kwargs(device="cuda")
    fit(**kwargs)
    assert next(kwargs["model"].parameters()).device.type == "cuda"


# --- misuse ---------------------------------------------------------------------------------------


def test_fit_refuses_an_optimizer_of_another_model():
    """An optimizer built for another model (or before the model was rebuilt) would train
    nothing, silently: the loss would stay where it is."""
    model, loader = linear_problem()
    other = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(other.parameters(), lr=0.1)
    with pytest.raises(
        ValueError, match="holds none of this model's parameters"
    ) as info:
        fit(**fit_kwargs(model=model, train_loader=loader, optimizer=optimizer))
    assert "torch.optim.AdamW(model.parameters()" in str(info.value)


def test_fit_accepts_an_optimizer_over_part_of_the_model():
    """Fine-tuning: an optimizer that updates only some of the parameters is legitimate."""
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    _, loader = linear_problem()
    optimizer = torch.optim.SGD(model[1].parameters(), lr=0.01)
    before = model[0].weight.detach().clone()
    fit(**fit_kwargs(model=model, train_loader=loader, optimizer=optimizer))
    assert torch.equal(model[0].weight, before)


def test_a_class_instead_of_an_instance_is_a_type_error():
    model, loader = linear_problem()
    with pytest.raises(
        TypeError, match="model must be a torch.nn.Module, got type"
    ):
        fit(**fit_kwargs(model=nn.Linear))
    with pytest.raises(
        TypeError, match="optimizer must be a torch.optim.Optimizer, got type"
    ):
        fit(**fit_kwargs(optimizer=torch.optim.SGD))
    with pytest.raises(
        TypeError, match="model must be a torch.nn.Module, got type"
    ):
        evaluate(nn.Linear, loader, nn.MSELoss())


def test_a_loss_class_instead_of_an_instance_is_refused():
    model, loader = linear_problem()
    message = r"got the class MSELoss itself; call it: loss_fn=MSELoss\(\)"
    with pytest.raises(TypeError, match=message):
        fit(**fit_kwargs(loss_fn=nn.MSELoss))
    with pytest.raises(TypeError, match=message):
        evaluate(model, loader, nn.MSELoss)


class _ReturnsWeightsToo(nn.Module):
    """A model that returns (output, attention weights), as return_attention=True does."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, x):
        return self.linear(x), torch.ones(x.shape[0], 1)


def test_fit_refuses_a_model_that_returns_a_tuple():
    model = _ReturnsWeightsToo()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(
        TypeError, match=r"returned a tuple of 2 items.*return_attention"
    ):
        fit(**fit_kwargs(model=model, optimizer=optimizer))


def test_evaluate_refuses_a_model_that_returns_a_tuple():
    _, loader = linear_problem()
    with pytest.raises(
        TypeError, match=r"returned a tuple of 2 items.*returns one tensor"
    ):
        evaluate(_ReturnsWeightsToo(), loader, nn.MSELoss())


def test_evaluate_refuses_bad_metrics_and_loaders():
    model, loader = linear_problem()
    with pytest.raises(TypeError, match="loader must be an iterable"):
        evaluate(model, torch.zeros(4, 3), nn.MSELoss())
    with pytest.raises(ValueError, match="other than 'loss'"):
        evaluate(model, loader, nn.MSELoss(), {"loss": mean_abs_error})


def test_the_shuffled_loader_depends_on_its_seed_alone():
    from torch.utils.data import TensorDataset

    from helpers.training import shuffled_loader

    data = TensorDataset(torch.arange(10))

    def order(seed, drop_last=True):
        torch.manual_seed(123)  # other random numbers do not matter
        batches = shuffled_loader(data, 4, seed, drop_last=drop_last)
        return [batch[0].tolist() for batch in batches]

    first = order(0)
    assert [len(b) for b in first] == [4, 4]  # the short batch dropped
    assert first == order(0) and first != order(1)
    assert [len(b) for b in order(0, drop_last=False)] == [4, 4, 2]
    assert sorted(sum(order(0, drop_last=False), [])) == list(range(10))
    with pytest.raises(ValueError, match="batch_size"):
        shuffled_loader(data, 0, 0)


def test_adamw_cosine_warms_up_then_decays():
    from helpers.training import adamw_cosine

    model = torch.nn.Linear(2, 2)
    optimizer, scheduler = adamw_cosine(model, 1e-2, 2, 10)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.defaults["weight_decay"] == 0.01  # AdamW's own default
    rates = []
    for _ in range(10):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    # step 0 at half the rate, step 1 at the full rate; then the cosine decay
    assert rates[0] == pytest.approx(5e-3) and rates[1] == pytest.approx(1e-2)
    assert (
        rates[2] == pytest.approx(1e-2) and rates[2] > rates[5] > rates[9] > 0
    )
    decayed, _ = adamw_cosine(model, 1e-2, 2, 10, weight_decay=0.1)
    assert decayed.defaults["weight_decay"] == 0.1
