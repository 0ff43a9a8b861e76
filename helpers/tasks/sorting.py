"""Chapter 9's token task: sort a sequence of digits of varying length, with padding.

The source is 1 to ``max_len`` digits, padded to ``max_len`` with ``PAD``; the target is the
same digits in ascending order followed by ``EOS``. The decoder reads ``BOS`` and the target
shifted right by one (teacher forcing). Token ids: ``PAD`` 0, ``BOS`` 1, ``EOS`` 2, digit
``d`` is ``d + 3``, so the vocabulary has :data:`VOCAB_SIZE` = 13 tokens shared by source and
target. Shapes: ``B`` batch, ``Ts`` source length (``max_len``), ``Tt`` target length
(``max_len + 1``), ``V`` vocabulary.

The model is :class:`helpers.transformer.EncoderDecoderTransformer` with ``pad_id=PAD``;
:func:`train_sorting` trains it with :func:`helpers.training.fit`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers import _validate as check
from helpers.training import cosine_warmup_schedule, fit
from helpers.transformer import EncoderDecoderTransformer

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "VOCAB_SIZE",
    "make_sorting_dataset",
    "sequence_loss",
    "sequence_accuracy",
    "generated_accuracy",
    "SortingConfig",
    "train_sorting",
]

PAD, BOS, EOS = 0, 1, 2
NUM_DIGITS = 10
VOCAB_SIZE = 3 + NUM_DIGITS


def make_sorting_dataset(
    num_sequences: int,
    max_len: int,
    generator: torch.Generator,
    min_len: int = 1,
    distinct: bool = False,
) -> TensorDataset:
    """``TensorDataset(source, decoder_input, target)`` of ``num_sequences`` sorting examples.

    ``source`` is ``(N, max_len)``, the two others ``(N, max_len + 1)``. Lengths are uniform
    in ``min_len .. max_len``, digits uniform in 0-9 (all different if ``distinct``, which
    needs ``max_len <= 10``). ``target`` is the sorted digits then ``EOS``; ``decoder_input``
    is ``BOS`` then the target without its last token; both padded with ``PAD``.
    """
    check.positive_int("num_sequences", num_sequences)
    check.positive_int("max_len", max_len)
    check.positive_int("min_len", min_len)
    check.generator(generator)
    if min_len > max_len or (distinct and max_len > NUM_DIGITS):
        raise ValueError(
            f"need 1 <= min_len <= max_len (and max_len <= {NUM_DIGITS} for distinct digits), "
            f"got min_len={min_len}, max_len={max_len}, distinct={distinct}"
        )
    lengths = torch.randint(min_len, max_len + 1, (num_sequences,), generator=generator)
    if distinct:  # the first max_len digits of a random permutation of 0-9
        digits = torch.rand(num_sequences, NUM_DIGITS, generator=generator).argsort(-1)[:, :max_len]
    else:
        digits = torch.randint(NUM_DIGITS, (num_sequences, max_len), generator=generator)
    real = torch.arange(max_len) < lengths[:, None]  # (N, max_len)
    source = torch.where(real, digits + 3, PAD)
    # sorting with PAD pushed past every digit keeps the real tokens first, in order
    ordered = torch.where(real, source, VOCAB_SIZE).sort(dim=-1).values
    ordered = torch.where(ordered == VOCAB_SIZE, PAD, ordered)
    padding = torch.full((num_sequences, 1), PAD)
    target = torch.cat([ordered, padding], dim=1)
    target[torch.arange(num_sequences), lengths] = EOS
    # the target shifted right: what position t reads is what position t - 1 predicts
    decoder_input = torch.cat([torch.full((num_sequences, 1), BOS), target[:, :-1]], dim=1)
    return TensorDataset(source, decoder_input, target)


def sequence_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the target's real tokens (``PAD`` positions are ignored)."""
    check.logits_targets(logits, target)
    return F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD)


def sequence_accuracy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Fraction of sequences whose every real target token (``EOS`` included) is the arg-max."""
    check.logits_targets(logits, target)
    right = (logits.argmax(-1) == target) | (target == PAD)
    return right.all(dim=-1).float().mean()


@torch.no_grad()
def generated_accuracy(model: EncoderDecoderTransformer, dataset: TensorDataset) -> float:
    """Fraction of sequences that greedy generation writes exactly, up to and with ``EOS``.

    The model writes every token from its own previous ones (no teacher forcing); tokens it
    writes after the target's ``EOS`` are not looked at.
    """
    source, _, target = dataset.tensors
    written = model.generate(source, BOS, target.shape[1])[:, 1:]
    right = (written == target) | (target == PAD)
    return right.all(dim=-1).float().mean().item()


@dataclass(frozen=True)
class SortingConfig:
    """Every choice of one sorting run (task, model and optimization)."""

    max_len: int = 8
    num_train: int = 20_000
    d_model: int = 32
    num_heads: int = 2
    num_blocks: int = 2
    ffn_width: int = 64
    batch_size: int = 256
    lr: float = 1e-2
    warmup_steps: int = 20
    epochs: int = 4
    seed: int = 0


def train_sorting(config: SortingConfig, train_set: TensorDataset, val_set=None):
    """Train an :class:`EncoderDecoderTransformer` on sorting; return ``(model, history)``.

    AdamW, cosine schedule with warm-up, cross-entropy ignoring ``PAD``, sequence accuracy
    (teacher-forced) as the metric, a history row every 10 steps.
    """
    if not isinstance(config, SortingConfig):
        raise TypeError(f"config must be a SortingConfig, got {type(config).__name__}")
    torch.manual_seed(config.seed)
    model = EncoderDecoderTransformer(
        VOCAB_SIZE,
        VOCAB_SIZE,
        config.d_model,
        config.num_heads,
        config.num_blocks,
        config.num_blocks,
        config.ffn_width,
        pad_id=PAD,
        tie_embeddings=True,
        max_len=64,
    )
    loader = DataLoader(
        train_set,
        batch_size=config.batch_size,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(config.seed),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    scheduler = cosine_warmup_schedule(optimizer, config.warmup_steps, config.epochs * len(loader))
    val_loader = None if val_set is None else DataLoader(val_set, batch_size=len(val_set))
    history = fit(
        model,
        loader,
        loss_fn=sequence_loss,
        optimizer=optimizer,
        scheduler=scheduler,
        epochs=config.epochs,
        val_loader=val_loader,
        metrics={"sequence_accuracy": sequence_accuracy},
        progress=False,
        log_every=10,
    )
    return model.eval(), history
