"""Chapter 9's token task: sort a sequence of digits of varying length, with
padding.

The source is 1 to ``max_len`` digits, padded to ``max_len`` with ``PAD``; the
target is the same digits in ascending order followed by ``EOS``. The decoder
reads ``BOS`` and the target shifted right by one (teacher forcing). Token ids:
``PAD`` 0, ``BOS`` 1, ``EOS`` 2, digit ``d`` is ``d + 3``, so the vocabulary has
:data:`VOCAB_SIZE` = 13 tokens shared by source and target. Shapes: ``B`` batch,
``Ts`` source length (``max_len``), ``Tt`` target length (``max_len + 1``),
``V`` vocabulary.

The model is :class:`helpers.transformer.EncoderDecoderTransformer` with
``pad_id=PAD``; :func:`train_sorting` trains it with
:func:`helpers.training.fit`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers import _validate as check
from helpers.masks import padding_mask
from helpers.tasks import shipped_table
from helpers.training import adamw_cosine, fit, shuffled_loader
from helpers.transformer import EncoderDecoderTransformer, TransformerConfig

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "VOCAB_SIZE",
    "make_sorting_dataset",
    "sequence_loss",
    "sequence_accuracy",
    "generated_accuracy",
    "next_to_write",
    "exposure_bias",
    "sequence_log_probs",
    "calibration",
    "permutation_hits",
    "SORTING_MODEL",
    "SortingConfig",
    "train_sorting",
    "train_and_measure",
    "seed_results",
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
    """``TensorDataset(source, decoder_input, target)`` of ``num_sequences``
    sorting examples.

    ``source`` is ``(N, max_len)``, the two others ``(N, max_len + 1)``. Lengths
    are uniform in ``min_len .. max_len``, digits uniform in 0-9 (all different
    if ``distinct``, which needs ``max_len <= 10``). ``target`` is the sorted
    digits then ``EOS``; ``decoder_input`` is ``BOS`` then the target without
    its last token; both padded with ``PAD``.
    """
    check.positive_int("num_sequences", num_sequences)
    check.positive_int("max_len", max_len)
    check.positive_int("min_len", min_len)
    check.generator(generator)
    if min_len > max_len or (distinct and max_len > NUM_DIGITS):
        raise ValueError(
            f"need 1 <= min_len <= max_len (and max_len <= {NUM_DIGITS} for "
            "distinct digits), "
            f"got min_len={min_len}, max_len={max_len}, distinct={distinct}"
        )
    lengths = torch.randint(
        min_len, max_len + 1, (num_sequences,), generator=generator
    )
    if distinct:  # the first max_len digits of a random permutation of 0-9
        digits = torch.rand(
            num_sequences, NUM_DIGITS, generator=generator
        ).argsort(-1)[:, :max_len]
    else:
        digits = torch.randint(
            NUM_DIGITS, (num_sequences, max_len), generator=generator
        )
    # (N, max_len): True at real tokens
    real = padding_mask(lengths, max_len)[:, 0, 0]
    source = torch.where(real, digits + 3, PAD)
    # sorting with PAD pushed past every digit keeps the real tokens first, in
    # order
    ordered = torch.where(real, source, VOCAB_SIZE).sort(dim=-1).values
    ordered = torch.where(ordered == VOCAB_SIZE, PAD, ordered)
    padding = torch.full((num_sequences, 1), PAD)
    target = torch.cat([ordered, padding], dim=1)
    target[torch.arange(num_sequences), lengths] = EOS
    # the target shifted right: what position t reads is what position t - 1
    # predicts
    decoder_input = torch.cat(
        [torch.full((num_sequences, 1), BOS), target[:, :-1]], dim=1
    )
    return TensorDataset(source, decoder_input, target)


def sequence_loss(
    logits: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Mean cross-entropy over the target's real tokens (``PAD`` positions are
    ignored).

    ``label_smoothing`` = epsilon trains towards ``1 - epsilon`` on the true
    token and ``epsilon / V`` on every token (Szegedy et al. 2016; Vaswani et
    al. 2017 use 0.1).
    """
    check.logits_targets(logits, target)
    check.probability("label_smoothing", label_smoothing)
    return F.cross_entropy(
        logits.flatten(0, 1),
        target.flatten(),
        ignore_index=PAD,
        label_smoothing=label_smoothing,
    )


def sequence_accuracy(
    logits: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """Fraction of sequences whose every real target token (``EOS`` included) is
    the arg-max."""
    check.logits_targets(logits, target)
    right = (logits.argmax(-1) == target) | (target == PAD)
    return right.all(dim=-1).float().mean()


@torch.no_grad()
def generated_accuracy(
    model: EncoderDecoderTransformer, dataset: TensorDataset, beam_size: int = 1
) -> float:
    """Fraction of sequences that generation writes exactly, up to and with
    ``EOS``.

    The model writes every token from its own previous ones (no teacher
    forcing), greedily (``beam_size=1``) or by beam search; tokens after the
    target's ``EOS`` are not looked at.
    """
    source, _, target = dataset.tensors
    written = model.generate(
        source, BOS, target.shape[1], end_id=EOS, beam_size=beam_size
    )
    return _accuracy(written, target)


@torch.no_grad()
def sequence_log_probs(
    model: EncoderDecoderTransformer, source, written
) -> torch.Tensor:
    """Total log-probability ``(B,)`` of each ``written`` sequence (``BOS``
    first), to ``EOS``.

    Positions after the first ``EOS`` (the padding :meth:`generate` writes)
    count for nothing.
    """
    log_probs = model(source, written[:, :-1]).log_softmax(dim=-1)
    # (B, T)
    token_log_probs = log_probs.gather(-1, written[:, 1:, None])[..., 0]
    after_end = (written[:, 1:] == EOS).long().cumsum(dim=-1) - (
        written[:, 1:] == EOS
    ).long()
    return token_log_probs.masked_fill(after_end > 0, 0.0).sum(dim=-1)


def next_to_write(source: torch.Tensor, written: torch.Tensor) -> torch.Tensor:
    """``(B, T)``: at position ``t``, what a sorter writes next after
    ``written[:, :t]``.

    The smallest source digit not yet written (digits counted with their
    repeats) and not below the last digit written, or ``EOS`` when none is left:
    the sorted continuation of the prefix. After the true prefix it is the
    target; after a prefix with a mistake in it (a digit skipped, repeated, or
    not in the source) it continues the sorted order from where the prefix
    stands, so a later token is not held against the wrong slot.
    """
    digits = torch.arange(3, VOCAB_SIZE, device=source.device)
    # (B, 10) digits in the source
    have = (source[..., None] == digits).sum(dim=1)
    is_digit = (written[..., None] == digits).long()  # (B, T, 10)
    used = is_digit.cumsum(dim=1) - is_digit  # written before position t
    # (B, T), inclusive
    last = (is_digit * digits).cummax(dim=1).values.amax(-1)
    floor = torch.cat([torch.zeros_like(last[:, :1]), last[:, :-1]], dim=1)
    left = (have[:, None] - used > 0) & (digits >= floor[..., None])
    smallest = left.long().argmax(dim=-1) + 3  # the first digit with some left
    return torch.where(left.any(dim=-1), smallest, EOS)


@torch.no_grad()
def exposure_bias(
    model: EncoderDecoderTransformer, dataset: TensorDataset
) -> dict[str, float]:
    """Per-token accuracy and loss, teacher forced against greedy generation, on
    ``dataset``.

    Greedy generation stops at the model's own ``EOS``; each token it writes,
    ``EOS`` included, is scored against :func:`next_to_write` given the model's
    own prefix (the target while the prefix is right). ``token_tf``: the
    fraction of the target's real tokens that are right given the true prefix;
    ``token_generated``: the fraction of the generated tokens that are right
    given the model's own prefix. ``after_*``: the same after the first token
    generation gets wrong, where the model reads a prefix with a mistake in it
    (teacher forcing: the target's real positions after that one);
    ``after_loss_*``: the mean cross-entropy of the right token there;
    ``num_after``: how many tokens generation writes there.
    ``after_by_position``: the same generated tokens scored against the target
    at their position, which after a skip or a repeat is the wrong slot.
    ``sequence_tf`` and ``sequence_generated`` are the sequence accuracies,
    which greedy decoding makes equal.
    """
    source, decoder_input, target = dataset.tensors
    written = model.generate(source, BOS, target.shape[1], end_id=EOS)[:, 1:]
    own_input = torch.cat([decoder_input[:, :1], written[:, :-1]], dim=1)
    ends = (written == EOS).long()
    own = ends.cumsum(dim=-1) - ends == 0  # up to the model's own EOS, included
    wanted = {"tf": target, "generated": next_to_write(source, written)}
    logits = {
        "tf": model(source, decoder_input),
        "generated": model(source, own_input),
    }
    right = {
        "tf": logits["tf"].argmax(-1) == target,
        "generated": written == wanted["generated"],
    }
    wrong = (~right["generated"] & own).long()
    mistake_before = wrong.cumsum(dim=-1) - wrong > 0  # (B, Tt)
    scored = {"tf": target != PAD, "generated": own}
    result = {
        "num_after": int((own & mistake_before).sum()),
        "after_by_position": (written == target)[own & mistake_before]
        .float()
        .mean()
        .item(),
    }
    for way in ("tf", "generated"):
        loss = F.cross_entropy(
            logits[way].transpose(1, 2), wanted[way], reduction="none"
        )
        after = scored[way] & mistake_before
        result[f"token_{way}"] = right[way][scored[way]].float().mean().item()
        result[f"after_{way}"] = right[way][after].float().mean().item()
        result[f"after_loss_{way}"] = loss[after].mean().item()
    with_start = torch.cat([decoder_input[:, :1], written], dim=1)
    return result | {
        "sequence_tf": (right["tf"] | (target == PAD))
        .all(-1)
        .float()
        .mean()
        .item(),
        "sequence_generated": _accuracy(with_start, target),
    }


@torch.no_grad()
def calibration(logits: torch.Tensor, target: torch.Tensor, num_bins: int = 10):
    """Expected calibration error of the arg-max predictions, and the
    reliability table.

    Over the target's real tokens: the confidence is the arg-max's softmax
    probability; the tokens are put in ``num_bins`` equal-width bins of
    confidence, and the error is the mean, weighted by bin size, of ``|accuracy
    - mean confidence|`` per bin (Guo et al. 2017). Returns ``(ece, table)``,
    the table a ``(num_bins, 3)`` tensor of mean confidence, accuracy and token
    count per bin (NaN for an empty bin).
    """
    check.logits_targets(logits, target)
    check.positive_int("num_bins", num_bins)
    real = target != PAD
    confidence, predicted = logits[real].softmax(dim=-1).max(dim=-1)
    right = (predicted == target[real]).double()
    confidence = confidence.double()
    bins = (confidence * num_bins).long().clamp(max=num_bins - 1)
    count = torch.bincount(bins, minlength=num_bins).double()
    mean_confidence = (
        torch.bincount(bins, confidence, minlength=num_bins) / count
    )
    accuracy = torch.bincount(bins, right, minlength=num_bins) / count
    gaps = (accuracy - mean_confidence).abs().nan_to_num() * count
    return (gaps.sum() / count.sum()).item(), torch.stack(
        [mean_confidence, accuracy, count], 1
    )


@torch.no_grad()
def permutation_hits(
    model: EncoderDecoderTransformer, distinct: TensorDataset
) -> torch.Tensor:
    """How often each cross-attention head looks up the digit being written.

    ``distinct`` holds sources of different digits and no padding, as
    ``make_sorting_dataset(..., min_len=max_len, distinct=True)`` draws them,
    so the ``t``-th smallest digit sits at one source position,
    ``source.argsort()[:, t]``. For each decoder block and head: the share of
    the queries that write a digit (not the last, which writes ``EOS``) whose
    largest weight falls on that position. Returns ``(num_layers, num_heads)``;
    chance is ``1 / Ts``. Chapter 9 and ``scripts/margins.py encoder-decoder``
    (its best head) measure it with this function.
    """
    source, decoder_input, _ = distinct.tensors
    repeated = source.sort(dim=-1).values.diff(dim=-1) == 0
    if repeated.any() or (source == PAD).any():
        raise ValueError(
            "permutation_hits needs sources of distinct digits and no "
            "padding: make_sorting_dataset(n, max_len, generator, "
            "min_len=max_len, distinct=True)"
        )
    order = source.argsort(dim=-1)  # order[b, t]: where the t-th smallest sits
    cross = model.get_attention_maps(source, decoder_input)["cross"]
    digits = source.shape[1]  # the queries that write a digit
    return torch.stack(
        [
            (w[:, :, :digits].argmax(-1) == order[:, None]).float().mean((0, 2))
            for w in cross
        ]
    )


SORTING_MODEL = TransformerConfig(
    source_vocab=VOCAB_SIZE,
    target_vocab=VOCAB_SIZE,
    d_model=32,
    num_heads=2,
    num_layers=2,
    ffn_width=64,
    pad_id=PAD,
    tie_embeddings=True,
    max_len=64,
)
"""Chapter 9's sorting model: two blocks on each side, ``D = 32``, two heads,
one shared vocabulary with tied embeddings."""


@dataclass(frozen=True, kw_only=True)
class SortingConfig:
    """Every choice of one sorting run: the task (sources of at most
    ``max_len`` digits, ``num_train`` of them), the ``model``
    (:data:`SORTING_MODEL` unless given) and the optimization."""

    max_len: int = 8
    num_train: int = 20_000
    model: TransformerConfig = SORTING_MODEL
    batch_size: int = 256
    lr: float = 1e-2
    warmup_steps: int = 20
    epochs: int = 4
    label_smoothing: float = 0.0
    seed: int = 0


def train_sorting(
    config: SortingConfig, train_set: TensorDataset, val_set=None
):
    """Train an :class:`EncoderDecoderTransformer` on sorting; return ``(model,
    history)``.

    AdamW, cosine schedule with warm-up, cross-entropy ignoring ``PAD``,
    sequence accuracy (teacher-forced) as the metric, a history row every 10
    steps.
    """
    check.instance("config", config, SortingConfig)
    torch.manual_seed(config.seed)
    model = EncoderDecoderTransformer(config.model)
    loader = shuffled_loader(train_set, config.batch_size, config.seed)
    optimizer, scheduler = adamw_cosine(
        model, config.lr, config.warmup_steps, config.epochs * len(loader)
    )
    val_loader = (
        None
        if val_set is None
        else DataLoader(val_set, batch_size=len(val_set))
    )
    history = fit(
        model,
        loader,
        loss_fn=partial(sequence_loss, label_smoothing=config.label_smoothing),
        optimizer=optimizer,
        scheduler=scheduler,
        epochs=config.epochs,
        val_loader=val_loader,
        metrics={"sequence_accuracy": sequence_accuracy},
        progress=False,
        log_every=10,
    )
    return model.eval(), history


def train_and_measure(
    config: SortingConfig,
    train_set: TensorDataset,
    test_set: TensorDataset,
    beam_size: int = 4,
) -> dict[str, float]:
    """Train one model (:func:`train_sorting`) and measure its decoding on
    ``test_set``.

    The keys of :func:`exposure_bias`, then: ``greedy`` and ``beam`` (sequence
    accuracy of greedy decoding and of beam search with ``beam_size``),
    ``beam_normalized`` (beam search ranked by log-prob per token,
    ``length_penalty=1``), ``greedy_short`` and ``beam_short`` (fraction of
    sequences that end before the target does), ``beam_log_prob_gain`` (mean
    total log-prob of beam search's sequences minus greedy's),
    ``beam_not_worse`` (fraction of sequences where beam search's log-prob is at
    least greedy's, to 1e-4), and, teacher forced, ``ece`` and ``reliability``
    (:func:`calibration`, the table as nested lists) and ``confidence`` (mean
    arg-max probability).
    """
    model, _ = train_sorting(config, train_set)
    source, decoder_input, target = test_set.tensors
    # length: EOS included
    steps, length = (
        target.shape[1],
        (target != PAD).sum(dim=-1),
    )
    written = {
        "greedy": model.generate(source, BOS, steps, end_id=EOS),
        "beam": model.generate(
            source, BOS, steps, end_id=EOS, beam_size=beam_size
        ),
        "beam_normalized": model.generate(
            source,
            BOS,
            steps,
            end_id=EOS,
            beam_size=beam_size,
            length_penalty=1.0,
        ),
    }
    result = exposure_bias(model, test_set)
    for name, tokens in written.items():
        result[name] = _accuracy(tokens, target)
        result[f"{name}_short"] = (
            ((tokens[:, 1:] != PAD).sum(-1) < length).float().mean().item()
        )
    gain = sequence_log_probs(
        model, source, written["beam"]
    ) - sequence_log_probs(model, source, written["greedy"])
    with torch.no_grad():
        logits = model(source, decoder_input)
    ece, reliability = calibration(logits, target)
    return result | {
        "beam_log_prob_gain": gain.mean().item(),
        "beam_not_worse": (gain > -1e-4).float().mean().item(),
        "ece": ece,
        "reliability": reliability.tolist(),
        "confidence": logits.softmax(-1).amax(-1)[target != PAD].mean().item(),
    }


def _accuracy(written: torch.Tensor, target: torch.Tensor) -> float:
    return (
        ((written[:, 1:] == target) | (target == PAD))
        .all(dim=-1)
        .float()
        .mean()
        .item()
    )


SEEDS_FILE = "encoder_decoder_seeds.csv"


def seed_results() -> pd.DataFrame:
    """Chapter 9's measures on five seeds, as written by ``scripts/margins.py
    encoder-decoder``.

    One row per seed (initialization and batch order; the data are the
    chapter's): both tasks at the chapter's budget, the sorting model at the
    short budget with and without label smoothing, and at the full budget with
    it (the keys of :func:`train_and_measure`, prefixed), with the machine and
    the command. The file ships with the package
    (``helpers/tasks/encoder_decoder_seeds.csv``), so the chapter shows the
    five-seed spread without training twenty models.
    """
    return shipped_table(
        SEEDS_FILE,
        "python scripts/margins.py encoder-decoder --out "
        f"helpers/tasks/{SEEDS_FILE}",
    )
