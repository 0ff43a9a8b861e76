"""Chapter 7's task: a Transformer encoder that learns to reverse sequences.

The model reads a sequence of ``T`` tokens and predicts, at every position
``t``, the token at position ``T - 1 - t``. Shapes: ``B`` batch, ``T`` sequence
length, ``C`` number of token classes, ``D`` model width. The data set is
:func:`make_reverse_dataset`.

:class:`ReverseConfig` holds every choice of a training run;
:data:`SOURCE_000_CONFIG` is source 000's configuration and :data:`BOOK_CONFIG`
the faster one chapter 7 uses. :func:`build_reverse_training` turns a
configuration into the model, optimizer, schedule and loader that
:func:`helpers.training.fit` takes, so the chapter and the benchmark script
(``scripts/bench_reverse.py``) train exactly the same way.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import _validate as check
from helpers.positional import SinusoidalPositionalEncoding
from helpers.tasks import shipped_table
from helpers.training import (
    adamw_cosine,
    evaluate,
    fit,
    shuffled_loader,
    token_cross_entropy,
)
from helpers.transformer import TransformerConfig, TransformerEncoder

__all__ = [
    "make_reverse_dataset",
    "ReversePredictor",
    "token_accuracy",
    "bag_oracle_accuracy",
    "ReverseConfig",
    "SOURCE_000_CONFIG",
    "BOOK_CONFIG",
    "SCHEDULE_EXPERIMENT",
    "ABLATIONS",
    "ablation_results",
    "schedule_results",
    "mirror_routing",
    "whole_sequence_accuracy",
    "length_accuracies",
    "attention_dropout_accuracy",
    "final_train_accuracy",
    "build_reverse_training",
    "steps_to_accuracy",
    "train_reverse",
    "train_and_test",
    "bare_loop",
]


def _check_num_classes(num_classes) -> None:
    check.positive_int("num_classes", num_classes)
    if num_classes < 2:
        raise ValueError(
            "num_classes must be at least 2 (with one token every sequence is "
            f"its own reversal), got {num_classes}"
        )


def _check_predictor(num_classes, config, positions) -> None:
    """The arguments of :class:`ReversePredictor`."""
    _check_num_classes(num_classes)
    check.instance("config", config, TransformerConfig)
    check.one_of("positions", positions, ("sinusoidal", "none"))


def make_reverse_dataset(
    num_sequences: int,
    seq_len: int,
    num_classes: int,
    generator: torch.Generator,
) -> TensorDataset:
    """Random token sequences and their reversals: ``TensorDataset(inputs,
    targets)``.

    ``inputs`` is ``[N, L]`` (int64) with tokens drawn uniformly from ``0 ..
    num_classes - 1``; ``targets`` is ``inputs.flip(-1)``: the token at position
    ``t`` must be predicted from the token at position ``L - 1 - t``. Draw from
    an explicit ``generator`` (one per split, with different seeds) so the
    training and test sets are reproducible and independent.
    """
    check.positive_int("num_sequences", num_sequences)
    check.positive_int("seq_len", seq_len)
    _check_num_classes(num_classes)
    check.generator(generator)
    inputs = torch.randint(
        num_classes, (num_sequences, seq_len), generator=generator
    )
    return TensorDataset(inputs, inputs.flip(-1))


class ReversePredictor(nn.Module):
    """Embedding, positional encoding, a pre-LN encoder, a per-token classifier.

    ``ReversePredictor(num_classes, config, positions="sinusoidal")``: the
    encoder is the one ``config`` (a :class:`TransformerConfig`) describes, and
    ``config.max_len`` bounds the sequences. ``forward(tokens)``: int64 ``(B,
    T)`` with values in ``0 .. C - 1``, ``T <= max_len``; returns logits ``(B,
    T, C)``. Nothing in it is specific to reversal: it labels every token of a
    sequence. ``positions="none"`` leaves the positional encoding out (an
    ablation: the model then cannot tell positions apart);
    ``config.norm_first=False`` makes the encoder post-LN (chapter 6).
    ``ReverseConfig.model`` is the config of a training run.
    """

    def __init__(
        self,
        num_classes: int,
        config: TransformerConfig,
        positions: str = "sinusoidal",
    ) -> None:
        super().__init__()
        _check_predictor(num_classes, config, positions)
        self.num_classes = num_classes
        self.embedding = nn.Embedding(num_classes, config.d_model)
        self.positional = (
            SinusoidalPositionalEncoding(config.d_model, config.max_len)
            if positions == "sinusoidal"
            else nn.Identity()
        )
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = TransformerEncoder(config)
        self.classifier = nn.Linear(config.d_model, num_classes)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Embed the tokens and add positions: ``(B, T) -> (B, T, D)``."""
        check.tokens(tokens, self.num_classes)
        return self.dropout(self.positional(self.embedding(tokens)))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.encoder(self.embed(tokens)))

    @torch.no_grad()
    def get_attention_maps(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Each block's attention weights on ``tokens``: ``(B, H, T, T)`` each.

        Call ``model.eval()`` first if the model has dropout: in training mode
        the maps are computed with attention dropout on (random, and not rows
        that sum to one).
        """
        return self.encoder.get_attention_maps(self.embed(tokens))


def token_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Fraction of tokens whose arg-max class is the target: a 0-dim tensor."""
    check.logits_targets(logits, targets)
    return (logits.argmax(dim=-1) == targets).float().mean()


def bag_oracle_accuracy(inputs: torch.Tensor, num_classes: int) -> float:
    """The best token accuracy on reversal for a model that cannot see
    positions.

        Without positions a model's prediction at ``t`` can depend only on the token at ``t`` and
        on the *bag* (multiset) of tokens of the sequence. The best it can then do is predict the
        most frequent token among the other ``T - 1`` positions. ``inputs`` is ``(N, T)``; returns
        the expected accuracy of that rule (ties split evenly) over the given sequences. This bounds
    the *expected* accuracy of any position-blind model on them; a particular
    model's measured accuracy on a finite test set can land slightly above it by
    chance (the targets are random given the bag).
    """
    if (
        not isinstance(inputs, torch.Tensor)
        or inputs.dim() != 2
        or inputs.shape[1] < 2
    ):
        raise ValueError("inputs must be an (N, T) integer tensor with T >= 2")
    # (N, 1, C)
    counts = F.one_hot(inputs, num_classes).sum(dim=1, keepdim=True)
    # (N, T, C): bag minus own token
    others = counts - F.one_hot(inputs, num_classes)
    # The target at t is, for such a model, a uniformly random element of the
    # other T - 1 tokens: predicting their most frequent one is right with
    # probability max count / (T - 1).
    best = others.max(dim=-1).values.float()
    return (best / (inputs.shape[1] - 1)).mean().item()


@dataclass(frozen=True, kw_only=True)
class ReverseConfig:
    """Every choice of one reversal training run: the task, the encoder
    (``model``, a :class:`TransformerConfig`) and the optimization.

    The schedule is a linear warm-up over ``warmup_steps`` (0: none), then a
    cosine decay to zero over the run (``cosine_decay=True``) or a constant
    learning rate (``False``). ``config.replace(dropout=0.1)`` changes a field
    of the run or of its model, by name.
    """

    seq_len: int = 16
    num_classes: int = 10
    num_train: int = 50_000
    model: TransformerConfig = field(
        default_factory=lambda: TransformerConfig(
            d_model=32, num_heads=2, num_layers=2, ffn_width=64, max_len=64
        )
    )
    positions: str = "sinusoidal"
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_steps: int = 100
    cosine_decay: bool = True
    epochs: int = 3
    clip_grad_norm: float | None = 5.0
    seed: int = 0

    def __post_init__(self) -> None:
        check.instance("model", self.model, TransformerConfig)
        if self.model.max_len < self.seq_len:
            raise ValueError(
                f"model.max_len={self.model.max_len} is shorter than "
                f"seq_len={self.seq_len}; build the model for longer "
                f"sequences: config.replace(max_len={self.seq_len})"
            )

    def steps_per_epoch(self) -> int:
        # the loader drops the last partial batch
        return self.num_train // self.batch_size

    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch()

    def replace(self, **changes) -> ReverseConfig:
        """A copy with some fields changed, the run's or its model's, e.g.
        ``config.replace(dropout=0.5, lr=1e-2)``."""
        own = {f.name for f in dataclasses.fields(self)}
        to_model = {k: changes.pop(k) for k in list(changes) if k not in own}
        model = changes.pop("model", self.model)
        if to_model:
            model = model.replace(**to_model)
        return dataclasses.replace(self, model=model, **changes)


SOURCE_000_CONFIG = ReverseConfig().replace(dropout=0.1)
"""Source 000's hyper-parameters (batch 32, lr 1e-3, 100 warm-up steps, 3
epochs, dropout 0.1).

Only the hyper-parameters: :func:`build_reverse_training` trains them on the
book's model and schedule. Source 000's own model differs: its classifier head
is Linear, LayerNorm, ReLU, Dropout, Linear, LayerNorm(num_classes) (the book's
:class:`ReversePredictor` has one Linear), its encoder has no final LayerNorm
(the book's pre-LN stack ends with one), and its schedule multiplies the warm-up
by ``0.5 * (1 + cos(pi * step / max_iter))`` (the book's
:func:`helpers.training.cosine_warmup_schedule` decays to zero over
``total_steps()``).
"""

BOOK_CONFIG = ReverseConfig(batch_size=128, lr=2e-2, warmup_steps=10, epochs=1)

ABLATIONS = {
    "plain": {},
    "no positions": {"positions": "none"},
    "dropout 0.1": {"dropout": 0.1},
    "dropout 0.3": {"dropout": 0.3},
}
"""Chapter 7's ablations of ``BOOK_CONFIG``, each a change of one setting: the
positional encoding left out, and dropout everywhere at source 000's 0.1 and at
0.3."""

ABLATIONS_FILE = "reverse_ablations.csv"


def ablation_results() -> pd.DataFrame:
    """Chapter 7's ablations on several seeds, as measured by
    ``scripts/margins.py reverse``.

    One row per run of :data:`ABLATIONS` and seed: the training accuracy at the
    end (mean of the last five logged rows, dropout active) and its standard
    deviation over the last ten, the test token and sequence accuracies, the bag
    oracle, and the machine and command that produced the file. It ships with
    the package (``helpers/tasks/reverse_ablations.csv``), so the chapter shows
    the spread over seeds without training them.
    """
    return shipped_table(
        ABLATIONS_FILE,
        "python scripts/margins.py reverse --part ablations --out "
        f"helpers/tasks/{ABLATIONS_FILE}",
    )


SCHEDULE_EXPERIMENT = {
    "book: lr 0.02, warm-up, cosine": {},
    "no warm-up": {"warmup_steps": 0},
    "constant lr": {"warmup_steps": 0, "cosine_decay": False},
    "lr 0.001": {"lr": 1e-3},
    "lr 0.1": {"lr": 0.1},
    "lr 0.1, no warm-up": {"lr": 0.1, "warmup_steps": 0},
    "lr 0.05, no warm-up": {"lr": 0.05, "warmup_steps": 0},
    "post-LN": {"norm_first": False},
    "post-LN, no warm-up": {"norm_first": False, "warmup_steps": 0},
    "post-LN, lr 0.05": {"norm_first": False, "lr": 0.05},
    "post-LN, lr 0.05, no warm-up": {
        "norm_first": False,
        "lr": 0.05,
        "warmup_steps": 0,
    },
}
"""Chapter 7's schedule experiment: each run is
``BOOK_CONFIG.replace(**changes)``.

"constant lr" has neither warm-up nor decay; "lr 0.001" is source 000's learning
rate; the post-LN runs test chapter 6's claim that pre-LN, unlike post-LN,
trains without warm-up.
"""


SCHEDULES_FILE = "reverse_schedules.csv"


def schedule_results() -> pd.DataFrame:
    """The schedule experiment on several seeds, as measured by
    ``scripts/margins.py reverse``.

    One row per run of :data:`SCHEDULE_EXPERIMENT` and seed: the steps to 99%
    training accuracy (empty if not reached), the accuracy at step 100 and over
    the last ten steps, and the machine and command that produced the file
    (``helpers/tasks/reverse_schedules.csv``).
    """
    return shipped_table(
        SCHEDULES_FILE,
        "python scripts/margins.py reverse --part schedules --out "
        f"helpers/tasks/{SCHEDULES_FILE}",
    )


@torch.no_grad()
def mirror_routing(model: ReversePredictor, inputs: torch.Tensor, seq_len: int):
    """How much each head routes the mirror token, and how many queries the
    best one routes at another length.

    For ``inputs`` of the training length ``seq_len``, the attention mass on
    the anti-diagonal (query ``t`` reads key ``seq_len - 1 - t``) per block and
    head, averaged over the sequences and the queries. Returns ``(block, head,
    mass, reads)``: the head with the most mass, the ``(num_layers,
    num_heads)`` table of masses (on the CPU), and ``reads(other)``, which
    counts the queries ``t < seq_len`` of sequences ``other`` (a batch of
    another length) whose mean attention in that head peaks at key ``seq_len -
    1 - t``: a model that learned "reverse" would instead read ``T' - 1 - t``.
    Chapter 7 and ``scripts/margins.py reverse`` measure both with it.
    """
    check.tokens(inputs, model.num_classes)
    if inputs.shape[1] != seq_len:
        raise ValueError(
            f"inputs must have the training length seq_len={seq_len}, got "
            f"{inputs.shape[1]}"
        )
    device = next(model.parameters()).device
    mirror = torch.arange(seq_len - 1, -1, -1)
    maps = [m.cpu() for m in model.get_attention_maps(inputs.to(device))]
    mass = torch.stack(
        [m[:, :, torch.arange(seq_len), mirror].mean(dim=(0, 2)) for m in maps]
    )
    block, head = divmod(int(mass.argmax()), mass.shape[1])

    def reads(other: torch.Tensor) -> int:
        if other.shape[1] < seq_len:
            raise ValueError(f"other must be at least seq_len={seq_len} long")
        maps = model.get_attention_maps(other.to(device))
        weights = maps[block][:, head].mean(0).cpu()  # (T', T')
        # the key each query t < seq_len reads most
        return int((weights.argmax(-1)[:seq_len] == mirror).sum())

    return block, head, mass, reads


@torch.no_grad()
def whole_sequence_accuracy(
    model: ReversePredictor, inputs: torch.Tensor, targets: torch.Tensor
) -> float:
    """The share of the sequences ``inputs`` whose every token the model gets
    right.

    One wrong token spoils a reversal, so this is at most the token accuracy
    and falls faster. The model runs on its own device, in the mode it is in
    (call ``model.eval()`` first if it has dropout). Chapter 7 and
    ``scripts/margins.py reverse`` measure it with this function.
    """
    device = next(model.parameters()).device
    predictions = model(inputs.to(device)).argmax(-1).cpu()
    return (predictions == targets).all(-1).float().mean().item()


@torch.no_grad()
def length_accuracies(
    model: ReversePredictor,
    lengths,
    num_sequences: int = 2000,
    seed: int = 3,
) -> dict[int, float]:
    """Token accuracy at each sequence length of ``lengths``: ``{length:
    accuracy}``.

    ``num_sequences`` new sequences of each length, drawn by
    :func:`make_reverse_dataset` from a generator seeded with ``seed``; the
    model runs on its own device, in the mode it is in. A model trained on one
    length that reverses only that one learned a fixed routing of positions,
    not "reverse" (chapter 7; ``scripts/margins.py reverse`` takes the best of
    the other lengths).
    """
    device = next(model.parameters()).device
    accuracies = {}
    for length in lengths:
        inputs, targets = make_reverse_dataset(
            num_sequences,
            length,
            model.num_classes,
            torch.Generator().manual_seed(seed),
        ).tensors
        logits = model(inputs.to(device)).cpu()
        accuracies[length] = token_accuracy(logits, targets).item()
    return accuracies


@torch.no_grad()
def attention_dropout_accuracy(
    model: ReversePredictor,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    p: float = 0.3,
) -> float:
    """Token accuracy of a trained model with its attention dropout set to
    ``p`` and switched on.

    Chapter 7's test of the mechanism: if each output read its token through
    one attention weight, the accuracy would fall to about ``1 - p``. Every
    block's attention dropout is set to ``p`` and the model put in training
    mode (which switches its other dropout layers on too, where it has any:
    the chapter's model has none), the drops seeded with
    ``torch.manual_seed(0)``. Afterwards each block's attention dropout is put
    back as it was and the model left in eval mode.
    """
    blocks = model.encoder.blocks
    trained = [block.self_attn.dropout for block in blocks]
    for block in blocks:
        block.self_attn.dropout = p
    model.train()
    torch.manual_seed(0)
    device = next(model.parameters()).device
    logits = model(inputs.to(device)).cpu()
    accuracy = token_accuracy(logits, targets).item()
    for block, dropout in zip(blocks, trained, strict=True):
        block.self_attn.dropout = dropout
    model.eval()
    return accuracy


def final_train_accuracy(history: pd.DataFrame) -> float:
    """A run's training accuracy at its end: the mean of the last five rows.

    ``history`` is :func:`helpers.training.fit`'s, each row the mean over the
    steps since the one before (ten for :func:`train_reverse`), measured as the
    training curve measures it: with dropout on, if the model has any.
    """
    return history["train_accuracy"].tail(5).mean()


def steps_to_accuracy(history, target: float = 0.99) -> int | None:
    """The first logged step at which a run's training accuracy reaches
    ``target``.

    ``history`` is :func:`helpers.training.fit`'s DataFrame, whose
    ``train_accuracy`` is the mean over the steps since the previous row (10 for
    :func:`train_reverse`). ``None`` if the run never gets there.
    """
    reached = history.loc[history["train_accuracy"] >= target, "step"]
    return int(reached.iloc[0]) if len(reached) else None


def build_reverse_training(config: ReverseConfig, train_set: TensorDataset):
    """The model, optimizer, schedule and loader of a run: what ``fit`` needs.

    Returns ``(model, optimizer, scheduler, train_loader)``. Adam(W) with the
    configured learning rate and weight decay; linear warm-up, then cosine decay
    over ``config.total_steps()`` steps (or a constant rate:
    ``cosine_decay=False``); a shuffling loader seeded by ``config.seed`` that
    drops the last partial batch. The model is initialized from ``config.seed``
    too.
    """
    check.instance("config", config, ReverseConfig)
    if (
        not isinstance(train_set, TensorDataset)
        or len(train_set) != config.num_train
    ):
        raise ValueError(
            "train_set must be a TensorDataset of "
            f"config.num_train={config.num_train} "
            "sequences; build it with "
            f"make_reverse_dataset({config.num_train}, ...)"
        )
    torch.manual_seed(config.seed)
    model = ReversePredictor(config.num_classes, config.model, config.positions)
    optimizer, scheduler = adamw_cosine(
        model,
        config.lr,
        config.warmup_steps,
        config.total_steps(),
        config.weight_decay,
        decay=config.cosine_decay,
    )
    loader = shuffled_loader(train_set, config.batch_size, config.seed)
    return model, optimizer, scheduler, loader


def train_reverse(
    config: ReverseConfig,
    train_set: TensorDataset,
    device=None,
    max_steps: int | None = None,
):
    """Train one run of ``config`` with :func:`helpers.training.fit`; return
    ``(model, history)``.

    The run of chapter 7's ablations and of ``scripts/margins.py reverse``: the
    model, optimizer, schedule and loader of :func:`build_reverse_training`,
    token cross-entropy, token accuracy as the metric, the configured gradient
    clipping, a row every 10 steps. ``max_steps`` stops the run early: its first
    steps are those of the full run, with the full run's schedule (which still
    decays over ``config.total_steps()``).
    """
    if max_steps is not None:
        check.positive_int("max_steps", max_steps)
        if config.epochs != 1 or max_steps > config.total_steps():
            raise ValueError(
                f"max_steps={max_steps} needs a one-epoch config with at least "
                f"that many steps (epochs={config.epochs}, "
                f"total_steps()={config.total_steps()})"
            )
    model, optimizer, scheduler, loader = build_reverse_training(
        config, train_set
    )
    if max_steps is not None:
        # the run's first batches
        loader = list(itertools.islice(loader, max_steps))
    history = fit(
        model,
        loader,
        loss_fn=token_cross_entropy,
        optimizer=optimizer,
        scheduler=scheduler,
        epochs=config.epochs,
        metrics={"accuracy": token_accuracy},
        clip_grad_norm=config.clip_grad_norm,
        device=device,
        progress=False,
        log_every=10,
    )
    return model, history


def train_and_test(
    config: ReverseConfig, train_set: TensorDataset, test_loader, device=None
):
    """Train one run of ``config`` (:func:`train_reverse`) and score it on
    ``test_loader``.

    Chapter 7's ablations share it, and so does ``scripts/margins.py reverse``.
    Returns ``(model, history, scores)``: the trained model in ``eval()`` mode,
    ``fit``'s history, and :func:`helpers.training.evaluate`'s ``{"loss": ...,
    "accuracy": ...}`` on the test set.
    """
    model, history = train_reverse(config, train_set, device=device)
    scores = evaluate(
        model, test_loader, token_cross_entropy, {"accuracy": token_accuracy}
    )
    return model.eval(), history, scores


def bare_loop(
    config: ReverseConfig,
    train_set: TensorDataset,
    val_set: TensorDataset,
    num_steps: int = 100,
) -> tuple[list[float], float]:
    """Training with nothing else: the model of ``config``, Adam at a constant
    learning rate of 0.01, the first ``num_steps`` shuffled batches.

    No schedule, no clipping, on the CPU; the model is initialized from
    ``config.seed``. Returns the loss of every step and the token accuracy on
    ``val_set`` afterwards.
    """
    torch.manual_seed(config.seed)
    model = ReversePredictor(config.num_classes, config.model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(train_set, batch_size=config.batch_size, shuffle=True)
    losses = []
    for inputs, targets in itertools.islice(loader, num_steps):
        logits = model(inputs)  # (B, T, C)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad()  # gradients add up unless cleared
        loss.backward()  # the gradient of the loss for every parameter
        optimizer.step()  # Adam's update of every parameter
        losses.append(loss.item())
    val_inputs, val_targets = val_set.tensors
    with torch.no_grad():
        accuracy = token_accuracy(model(val_inputs), val_targets).item()
    return losses, accuracy
