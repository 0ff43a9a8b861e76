"""Chapter 13's length-generalization task: retrieve what followed the last
occurrence.

At position ``t`` the target is the token that followed the most recent earlier
occurrence of token ``x_t``: if ``x_j = x_t`` for a latest ``j < t``, the answer
is ``x_{j+1}``. (Positions whose token has not occurred before have no target,
-100.) The chapter's sequences are ``T / 2`` distinct random tokens followed by
the same tokens rotated by a random shift, so that every answer is unique and
lies at a distance that varies from sequence to sequence; with
``repeated=False`` tokens are uniform instead. The rule reads the same at every
length, so a model that has learned *the rule* should answer as well on
sequences twice or four times as long as those it was trained on; a model that
has learned *the positions it saw* will not. Solving it takes two steps of
attention, the classic "induction head": one head copies each token's
predecessor into its position, a later one looks for the current token among
those predecessors.

:func:`train_retrieval` trains a small :class:`helpers.gpt.GPT` with one kind of
positional information on length ``T`` and returns it with its accuracy at
several lengths; it is a module-level function so that
:func:`helpers.parallel.run_in_processes` can run the kinds side by side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd
import torch
from torch import Tensor

from helpers import _validate as check
from helpers.gpt import GPT, GPTConfig
from helpers.masks import earlier_mask
from helpers.tasks import shipped_table
from helpers.training import adamw_cosine, fit, token_cross_entropy

__all__ = [
    "IGNORE",
    "retrieval_targets",
    "make_retrieval_data",
    "RetrievalConfig",
    "retrieval_accuracy",
    "SCALES",
    "train_retrieval",
    "SEEDS_FILE",
    "seed_results",
]

IGNORE = -100
"""The target of a position with nothing to retrieve (PyTorch's
``ignore_index``)."""


def retrieval_targets(tokens: Tensor) -> Tensor:
    """The task's targets for ``tokens`` (B, T), int64: what followed the last
    occurrence.

    ``targets[b, t] = tokens[b, j + 1]`` for the largest ``j < t`` with
    ``tokens[b, j] == tokens[b, t]``, and :data:`IGNORE` where there is no such
    ``j``.
    """
    check.tensor("tokens", tokens)
    if tokens.dtype != torch.int64 or tokens.ndim != 2:
        raise TypeError(
            "tokens must be an int64 tensor of shape (B, T), got "
            f"{tokens.dtype} of shape "
            f"{tuple(tokens.shape)}"
        )
    length = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, T_query, T_key)
    earlier = earlier_mask(length)  # (T_query, T_key): key j < query t
    candidates = same & earlier
    # the latest earlier occurrence: the largest j where candidates is True
    # (B, T)
    latest = torch.where(candidates, torch.arange(length), -1).amax(dim=-1)
    following = tokens.gather(1, (latest + 1).clamp(max=length - 1))
    return torch.where(latest >= 0, following, IGNORE)


def make_retrieval_data(
    num_sequences: int,
    seq_len: int,
    vocab_size: int,
    seed: int,
    repeated: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(tokens, targets)``, both (N, T) int64: random tokens and their
    targets.

    ``repeated=False``: tokens uniform over the vocabulary (a token may occur
    several times; the latest occurrence counts). ``repeated=True``: ``T / 2``
    distinct tokens, then the same tokens again, rotated by a random shift: each
    token of the second half has exactly one earlier occurrence, at a distance
    that varies from sequence to sequence, so that no fixed offset answers the
    task (T even, ``vocab_size >= T / 2``).
    """
    check.positive_int("num_sequences", num_sequences)
    check.positive_int("seq_len", seq_len)
    check.positive_int("vocab_size", vocab_size)
    if vocab_size < 2:
        raise ValueError(
            "vocab_size must be at least 2, or every answer is the same token"
        )
    check.non_negative_int("seed", seed)
    check.boolean("repeated", repeated)
    generator = torch.Generator().manual_seed(seed)
    if not repeated:
        tokens = torch.randint(
            vocab_size, (num_sequences, seq_len), generator=generator
        )
        return tokens, retrieval_targets(tokens)
    if seq_len % 2 or vocab_size < seq_len // 2:
        raise ValueError(
            "repeated=True needs an even seq_len and vocab_size >= seq_len / "
            f"2 (distinct tokens in each half), got seq_len={seq_len}, "
            f"vocab_size={vocab_size}"
        )
    noise = torch.rand(num_sequences, vocab_size, generator=generator)
    # distinct tokens, random order
    half = noise.argsort(dim=-1)[:, : seq_len // 2]
    shifts = torch.randint(
        seq_len // 2, (num_sequences, 1), generator=generator
    )
    rotated = half.gather(
        1, (torch.arange(seq_len // 2) + shifts) % (seq_len // 2)
    )
    tokens = torch.cat([half, rotated], dim=1)
    return tokens, retrieval_targets(tokens)


@dataclass(frozen=True, kw_only=True)
class RetrievalConfig:
    """The model and the training budget of chapter 13's length-generalization
    runs.

    The model is ``GPT(model.replace(positions=...))``, each run choosing its
    kind of positions; its ``context_length`` is the longest test length, so
    that every kind of position can at least be *run* there (a learned table's
    rows beyond ``train_len`` are never trained). Training sees ``steps`` fresh
    batches of length ``train_len``.
    """

    model: GPTConfig = field(
        default_factory=lambda: GPTConfig(vocab_size=64, context_length=128)
    )
    train_len: int = 32
    test_lengths: tuple[int, ...] = (32, 64, 128)
    steps: int = 800
    batch_size: int = 32
    lr: float = 3e-3
    warmup_fraction: float = 0.1
    num_test: int = 500
    repeated: bool = True

    def __post_init__(self) -> None:
        check.instance("model", self.model, GPTConfig)
        longest = max(self.test_lengths)
        if self.model.context_length != longest:
            raise ValueError(
                f"the model's context_length ({self.model.context_length}) "
                f"must be the longest test length, {longest}: build it with "
                f"GPTConfig(..., context_length={longest})"
            )


SCALES = (None, "tokens", "encoding")
"""How :func:`train_retrieval` may rescale the embeddings at the input
(``scale=``)."""


class _Multiply:
    """A forward hook that multiplies a module's output by a constant
    (picklable)."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(
        self, module: torch.nn.Module, inputs, output: Tensor
    ) -> Tensor:
        return output * self.factor


def _rescale(
    model: GPT, positions: str, scale: str | None, d_model: int
) -> None:
    """Apply ``scale`` to a freshly initialized model (see
    :func:`train_retrieval`)."""
    # Vaswani et al.: embeddings times sqrt(D) on the way in only
    if scale == "tokens":
        model.token_embedding.register_forward_hook(
            _Multiply(math.sqrt(d_model))
        )
    elif scale == "encoding":
        if positions != "sinusoidal":
            raise ValueError(
                "scale='encoding' needs positions='sinusoidal', "
                f"got {positions!r}"
            )
        table = model.position_embedding.pe
        # the tokens' initial size, 0.02
        table.mul_(0.02 / table.pow(2).mean().sqrt())


def retrieval_accuracy(
    model: torch.nn.Module, tokens: Tensor, targets: Tensor
) -> float:
    """The fraction of positions with a target whose arg-max prediction is
    right."""
    model.eval()
    with torch.no_grad():
        predicted = model(tokens).argmax(dim=-1)
    scored = targets != IGNORE
    return (predicted[scored] == targets[scored]).float().mean().item()


def train_retrieval(
    positions: str,
    seed: int,
    config: RetrievalConfig = RetrievalConfig(),
    scale: str | None = None,
) -> tuple[GPT, dict[int, float]]:
    """Train one model on length ``config.train_len``; return it and ``{length:
    accuracy}``.

    ``positions`` is one of :data:`helpers.gpt.POSITIONS`. ``seed`` sets the
    initialization and the training data; the test sets (``config.num_test``
    sequences per test length) are the same for every seed and every kind, drawn
    from seeds 10_000 + length. Adam with a linear warm-up and a cosine decay,
    gradients clipped to 1.

    ``scale`` (one of :data:`SCALES`) fixes the size mismatch at initialization
    between an added position table and the token embeddings (N(0, 0.02^2),
    GPT-2's): ``"tokens"`` multiplies the token embeddings by ``sqrt(d_model)``
    on the way in, as Vaswani et al. do (the tied output head is unchanged);
    ``"encoding"`` shrinks the sinusoidal table to the tokens' initial
    root-mean-square size, 0.02 (``positions="sinusoidal"`` only).
    """
    check.non_negative_int("seed", seed)
    check.instance("config", config, RetrievalConfig)
    check.one_of("scale", scale, SCALES)
    # positions are checked here, before any training
    model_config = config.model.replace(positions=positions)
    vocab_size = model_config.vocab_size
    torch.manual_seed(seed)
    model = GPT(model_config)
    _rescale(model, positions, scale, model_config.d_model)
    tokens, targets = make_retrieval_data(
        config.steps * config.batch_size,
        config.train_len,
        vocab_size,
        seed,
        config.repeated,
    )
    sizes = config.batch_size
    batches = list(zip(tokens.split(sizes), targets.split(sizes), strict=True))
    warmup = math.ceil(config.warmup_fraction * config.steps)
    optimizer, scheduler = adamw_cosine(  # weight decay 0: Adam
        model, config.lr, warmup, config.steps, 0.0
    )
    fit(
        model,
        batches,
        loss_fn=token_cross_entropy,
        optimizer=optimizer,
        epochs=1,
        scheduler=scheduler,
        clip_grad_norm=1.0,
        progress=False,
        log_every=config.steps,
    )
    accuracy = {
        length: retrieval_accuracy(
            model,
            *make_retrieval_data(
                config.num_test,
                length,
                vocab_size,
                10_000 + length,
                config.repeated,
            ),
        )
        for length in config.test_lengths
    }
    return model.eval(), accuracy


SEEDS_FILE = "retrieval_seeds.csv"


def seed_results() -> pd.DataFrame:
    """Chapter 13's runs on five seeds, as measured by ``scripts/margins.py
    long``.

    One row per run: ``positions``, ``scale`` (``"-"``, ``"tokens"`` or
    ``"encoding"``, see :func:`train_retrieval`), ``seed``, the accuracy at each
    test length (columns ``"32"``, ``"64"``, ``"128"``), and the ``numerics``,
    ``machine`` and ``command`` that produced it. The file ships with the
    package (``helpers/tasks/retrieval_seeds.csv``), so that the chapter states
    the spread over seeds without training them all.
    """
    return shipped_table(
        SEEDS_FILE,
        "python scripts/margins.py long --part retrieval --seeds 5 "
        f"--out helpers/tasks/{SEEDS_FILE}",
    )
