"""Chapter 10's language: balanced brackets of three kinds, one string per line.

A string of the language (a *Dyck* word) is a sequence of ``( ) [ ] { }`` in
which every opening bracket is closed by the closing bracket of its own kind, in
last-opened-first-closed order: ``([]{})`` belongs to it, ``([)]`` and ``(()``
do not. A program checks membership (:func:`is_balanced`), so "the model learned
the language" becomes a measured fraction of valid samples, and where the
language leaves no choice (which kind of bracket closes here) there is a right
answer to score (:func:`closing_accuracy`).

Characters are the tokens (:data:`ALPHABET`, a newline then the six brackets).
Each training row is a newline followed by as many whole strings as fit, each
ended by a newline (:func:`make_rows`): the model learns to start after a
newline and to end a string with one. Shapes: ``N`` rows, ``T`` positions
(``context_length``), ``V`` = 7.

The model is :class:`helpers.gpt.GPT`; :func:`train_brackets` trains it with
:func:`helpers.training.fit`. The baseline is an n-gram model fitted to the same
strings, each counted on its own between two newlines (:class:`NGramModel`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers import _validate as check
from helpers.gpt import GPT, GPTConfig
from helpers.training import (
    adamw_cosine,
    fit,
    shuffled_loader,
    token_cross_entropy,
)

__all__ = [
    "ALPHABET",
    "NEWLINE",
    "OPENERS",
    "CLOSERS",
    "IGNORE",
    "encode",
    "decode",
    "make_strings",
    "is_balanced",
    "expected_closer",
    "string_log_probability",
    "entropy_rate",
    "generator_loss",
    "packed_generator_loss",
    "make_rows",
    "NGramModel",
    "validity_rate",
    "sample_statistics",
    "closing_accuracy",
    "per_token_loss",
    "sample_strings",
    "gpt_probabilities",
    "BracketConfig",
    "train_brackets",
    "OVERFIT",
    "overfitting_run",
]

NEWLINE = "\n"
OPENERS, CLOSERS = "([{", ")]}"
ALPHABET = NEWLINE + "()[]{}"
IGNORE = -100  # targets that do not count (F.cross_entropy's ignore_index)
_ID = {char: index for index, char in enumerate(ALPHABET)}
_MATCH = dict(zip(OPENERS, CLOSERS, strict=True))


def encode(text: str) -> list[int]:
    """Character ids of ``text`` (each character must be in :data:`ALPHABET`)."""
    unknown = sorted(set(text) - set(ALPHABET))
    if unknown:
        raise ValueError(
            f"characters {unknown} are not in the alphabet {ALPHABET!r}"
        )
    return [_ID[char] for char in text]


def decode(ids: Sequence[int]) -> str:
    """The characters of a sequence of ids."""
    return "".join(ALPHABET[int(index)] for index in ids)


# ----------------------------------------------------------------- the language


def make_strings(
    num_strings: int,
    generator: torch.Generator,
    max_pairs: int = 16,
    max_depth: int = 8,
) -> list[str]:
    """``num_strings`` random balanced strings of 1 to ``max_pairs`` bracket
    pairs.

    The number of pairs is uniform; the string is a random walk of opening and
    closing moves (equally likely where both are allowed) whose depth never
    exceeds ``max_depth``, with each opening bracket's kind uniform among the
    three.
    """
    check.positive_int("num_strings", num_strings)
    check.positive_int("max_pairs", max_pairs)
    check.positive_int("max_depth", max_depth)
    check.generator(generator)
    pairs = torch.randint(
        1, max_pairs + 1, (num_strings,), generator=generator
    ).tolist()
    coins = torch.rand(num_strings, 2 * max_pairs, generator=generator).tolist()
    kinds = torch.randint(
        3, (num_strings, 2 * max_pairs), generator=generator
    ).tolist()
    strings = []
    for n, coin, kind in zip(pairs, coins, kinds, strict=True):
        stack, chars = [], []
        for step in range(2 * n):
            remaining = 2 * n - step
            can_open, _ = _moves(len(stack), remaining, max_depth)
            if stack and (not can_open or coin[step] < 0.5):
                chars.append(_MATCH[stack.pop()])
            else:
                stack.append(OPENERS[kind[step]])
                chars.append(stack[-1])
        strings.append("".join(chars))
    return strings


def is_balanced(text: str) -> bool:
    """True if ``text`` is a non-empty string of the language: brackets only,
    all matched."""
    stack = []
    for char in text:
        if char in _MATCH:
            stack.append(_MATCH[char])
        elif char not in CLOSERS or not stack or stack.pop() != char:
            return False
    return bool(text) and not stack


def expected_closer(prefix: str) -> str | None:
    """The closing bracket that may come next after ``prefix`` (None if nothing
    is open)."""
    stack = []
    for char in prefix:
        if char in _MATCH:
            stack.append(_MATCH[char])
        elif char in CLOSERS:
            stack.pop()
    return stack[-1] if stack else None


def _moves(depth: int, remaining: int, max_depth: int) -> tuple[bool, bool]:
    """``(can_open, can_close)`` of :func:`make_strings`'s walk at a depth,
    steps remaining."""
    can_open = depth < min(max_depth, remaining)  # room to close it again
    return can_open, depth > 0


def string_log_probability(
    text: str, max_pairs: int = 16, max_depth: int = 8
) -> float:
    """``log P(text)`` (nats) under :func:`make_strings` with the same arguments
    (-inf if never).

    The walk's choices are read off the string: ``log(1 / max_pairs)`` for the
    number of pairs, ``log(1/2)`` at each step where both moves were allowed,
    ``log(1/3)`` for each opener's kind.
    """
    check.positive_int("max_pairs", max_pairs)
    check.positive_int("max_depth", max_depth)
    pairs, stack = len(text) // 2, []
    if len(text) % 2 or not 1 <= pairs <= max_pairs or not is_balanced(text):
        return -math.inf
    log_p = -math.log(max_pairs)
    for step, char in enumerate(text):
        can_open, can_close = _moves(len(stack), len(text) - step, max_depth)
        if char in OPENERS and not can_open:
            return -math.inf  # deeper than max_depth
        log_p -= math.log(2) * (can_open and can_close) + math.log(3) * (
            char in OPENERS
        )
        stack.append(char) if char in OPENERS else stack.pop()
    return log_p


def entropy_rate(max_pairs: int = 16, max_depth: int = 8) -> float:
    """The language's exact entropy in nats per token, the end-of-string newline
    included.

    ``H(string) / (E[length] + 1)``: the loss, per predicted character, of the
    generator's own probabilities on an endless stream of its strings (each
    followed by a newline), so the floor that no model's expected loss goes
    below. ``H`` adds the choices of :func:`string_log_probability`: the number
    of pairs, ``n log 3`` for the kinds, and ``log 2`` times the expected number
    of steps with two allowed moves (summed exactly over the walk's depth
    distribution).
    """
    check.positive_int("max_pairs", max_pairs)
    check.positive_int("max_depth", max_depth)
    entropy, length = math.log(max_pairs), 0.0
    for pairs in range(1, max_pairs + 1):
        depths, free_steps = {0: 1.0}, 0.0  # P(depth) before each step
        for step in range(2 * pairs):
            after: dict[int, float] = defaultdict(float)
            for depth, p in depths.items():
                can_open, can_close = _moves(depth, 2 * pairs - step, max_depth)
                free_steps += p * (can_open and can_close)
                share = 0.5 if can_open and can_close else 1.0
                if can_open:
                    after[depth + 1] += p * share
                if can_close:
                    after[depth - 1] += p * share
            depths = after
        entropy += (pairs * math.log(3) + free_steps * math.log(2)) / max_pairs
        length += (2 * pairs + 1) / max_pairs
    return entropy / length


def generator_loss(
    strings: Sequence[str], max_pairs: int = 16, max_depth: int = 8
) -> float:
    """The generator's own loss on ``strings`` (nats per character, end newlines
    included).

    What :func:`per_token_loss` would give for a model that predicts with the
    true probabilities, on the rows of ``strings``: ``sum(-log P(s)) /
    sum(len(s) + 1)``.
    """
    total = -sum(
        string_log_probability(text, max_pairs, max_depth) for text in strings
    )
    return total / sum(len(text) + 1 for text in strings)


def _row_places(
    strings: Sequence[str], context_length: int
) -> list[int | None]:
    """Where :func:`make_rows` puts each string: None if it starts a row, else
    the room left.

    The room is the length of the longest string that fits there.
    """
    # a full row: the first string starts a new one
    places, used = (
        [],
        context_length + 1,
    )
    for text in strings:
        room = context_length - used
        if len(text) > room:
            places.append(None)
            used = 1
        else:
            places.append(room)
        used += len(text) + 1
    return places


def packed_generator_loss(
    strings: Sequence[str],
    reference: Sequence[str],
    context_length: int,
    max_pairs: int = 16,
) -> float:
    """The generator's loss on the rows of ``strings`` when it also knows how
    rows are packed.

    :func:`make_rows` leaks a little about the next string: one that follows
    another in a row fits in the room left, so its length is drawn from the
    lengths that fit (probability ``P(s) / P(length <= room)``), and the first
    string of a row is the one that did not fit in the last row, so long ones
    are over-represented there (its length distribution is counted on the rows
    of ``reference``, the training strings). Lower than :func:`generator_loss`
    on the same strings by what a model that knows its place in the row can
    learn from the packing.
    """
    lengths = [2 * pairs for pairs in range(1, max_pairs + 1)]  # equally likely
    places = _row_places(reference, context_length)
    firsts = [
        len(text)
        for text, room in zip(reference, places, strict=True)
        if room is None
    ]
    first_share = {n: firsts.count(n) / len(firsts) for n in lengths}
    missing = sorted(
        {len(t) for t in strings} - {n for n in lengths if first_share[n] > 0}
    )
    if missing:
        raise ValueError(
            "no row of the reference strings starts with a string of length "
            f"{missing}; pass more reference strings"
        )
    total = 0.0
    for text, room in zip(
        strings, _row_places(strings, context_length), strict=True
    ):
        total -= string_log_probability(text, max_pairs)
        # P(length) = 1 / max_pairs becomes the share among first strings
        if room is None:
            total -= math.log(first_share[len(text)] * max_pairs)
        else:
            total += math.log(sum(n <= room for n in lengths) / max_pairs)
    return total / sum(len(text) + 1 for text in strings)


def make_rows(strings: Sequence[str], context_length: int) -> TensorDataset:
    """``TensorDataset(inputs, targets)``, both int64 ``(N, context_length)``:
    strings packed.

    Each row is a newline followed by as many whole strings as fit, each ended
    by a newline (``"\\n([])\\n{}\\n"``), in the order given; no string is cut.
    ``inputs`` is the row without its last character, ``targets`` the row
    without its first (the next character at every position). Rows are padded to
    ``context_length``; padded targets are :data:`IGNORE`.
    """
    check.positive_int("context_length", context_length)
    longest = max(len(text) for text in strings) + 1
    if longest > context_length:
        raise ValueError(
            f"a string of {longest - 1} characters needs context_length >= "
            f"{longest}, got {context_length}"
        )
    rows, row = [], NEWLINE
    for text in strings:
        if len(row) + len(text) + 1 > context_length + 1:
            rows.append(row)
            row = NEWLINE
        row += text + NEWLINE
    rows.append(row)
    # padded with newlines
    inputs = torch.zeros(len(rows), context_length, dtype=torch.long)
    targets = torch.full((len(rows), context_length), IGNORE, dtype=torch.long)
    for index, text in enumerate(rows):
        ids = torch.tensor(encode(text))
        inputs[index, : len(ids) - 1] = ids[:-1]
        targets[index, : len(ids) - 1] = ids[1:]
    return TensorDataset(inputs, targets)


# ----------------------------------------------------------------- the baseline


class NGramModel:
    """A character n-gram model: the next character given the previous ``n -
    1``.

    Fitted by counting on the rows ``newline + string + newline`` (contexts at
    the start of a row are padded with newlines), with add-``alpha`` smoothing.
    ``probabilities(prefix)`` returns the distribution over :data:`ALPHABET`
    after a string prefix.
    """

    def __init__(self, n: int, alpha: float = 0.1) -> None:
        check.positive_int("n", n)
        self.n = n
        check.positive_number("alpha", alpha, "0.1 is a mild smoothing")
        self.alpha = alpha
        self.counts: dict[str, Counter] = defaultdict(Counter)

    def _context(self, prefix: str) -> str:
        padded = NEWLINE * (self.n - 1) + prefix
        return padded[len(padded) - (self.n - 1) :]

    def fit(self, strings: Sequence[str]) -> NGramModel:
        for text in strings:
            row = NEWLINE + text + NEWLINE
            for t in range(1, len(row)):
                self.counts[self._context(row[:t])][row[t]] += 1
        return self

    def probabilities(self, prefix: str) -> torch.Tensor:
        """``(V,)`` float64 probabilities of the next character after ``newline
        + prefix``."""
        seen = self.counts.get(self._context(NEWLINE + prefix), Counter())
        counts = torch.tensor(
            [seen[char] for char in ALPHABET], dtype=torch.float64
        )
        return (counts + self.alpha) / (
            counts.sum() + self.alpha * len(ALPHABET)
        )

    def loss(self, strings: Sequence[str]) -> float:
        """Mean cross-entropy (nats) per predicted character of the rows of
        ``strings``."""
        total = count = 0
        for text in strings:
            for t, char in enumerate(text + NEWLINE):
                total -= math.log(
                    self.probabilities(text[:t])[_ID[char]].item()
                )
                count += 1
        return total / count

    def sample(
        self, num_strings: int, generator: torch.Generator, max_len: int
    ) -> list[str]:
        """Strings drawn character by character until a newline (at most
        ``max_len`` chars)."""
        strings = []
        for _ in range(num_strings):
            text = ""
            while len(text) < max_len:
                char = ALPHABET[
                    torch.multinomial(
                        self.probabilities(text), 1, generator=generator
                    )
                ]
                if char == NEWLINE:
                    break
                text += char
            strings.append(text if len(text) < max_len else None)
        return strings


# ----------------------------------------------------------------- measurements


def validity_rate(strings: Sequence[str | None]) -> float:
    """The fraction of ``strings`` that belong to the language (None,
    unfinished, counts as not)."""
    if not strings:
        raise ValueError("no strings to score; sample at least one")
    return sum(
        text is not None and is_balanced(text) for text in strings
    ) / len(strings)


def sample_statistics(
    strings: Sequence[str | None], known: set[str]
) -> dict[str, float]:
    """What a set of samples holds (None: a sample that never ended).

    Shares of all the samples: ``valid`` (:func:`validity_rate`), ``distinct``
    finished strings, ``new`` (finished, not in ``known``, the training
    strings) and ``valid and new``; ``mean length`` of the finished ones; and,
    of the valid ones, ``valid mean length`` and ``valid over 32``, the share
    longer than 32 characters, which the generator never writes (it draws at
    most 16 pairs).
    """
    if not strings:
        raise ValueError("no strings to describe; sample at least one")
    finished = [text for text in strings if text is not None]
    valid = [text for text in finished if is_balanced(text)]
    count = len(strings)
    return {
        "valid": validity_rate(strings),
        "distinct": len(set(finished)) / count,
        "new": sum(text not in known for text in finished) / count,
        "valid and new": sum(text not in known for text in valid) / count,
        "mean length": sum(map(len, finished)) / max(len(finished), 1),
        "valid mean length": sum(map(len, valid)) / max(len(valid), 1),
        "valid over 32": sum(len(text) > 32 for text in valid)
        / max(len(valid), 1),
    }


def closing_accuracy(
    probabilities: Callable[[str], torch.Tensor],
    strings: Sequence[str],
    distance: tuple[int, int] | None = None,
) -> float:
    """Where a string closes a bracket, how often the most likely *closing*
    bracket is right.

    At each such position the kind is forced by the bracket left open, so there
    is one right answer. ``probabilities(prefix)`` returns ``(V,)``
    next-character probabilities after ``newline + prefix``. ``distance=(low,
    high)`` scores only the positions whose opening bracket is ``low`` to
    ``high`` characters back (1 = the character just before).
    """
    right = total = 0
    closer_ids = encode(CLOSERS)
    for text in strings:
        opened = []  # positions of the brackets still open
        for t, char in enumerate(text):
            if char in OPENERS:
                opened.append(t)
                continue
            back = t - opened.pop()
            if distance is None or distance[0] <= back <= distance[1]:
                scores = probabilities(text[:t])[closer_ids]
                right += CLOSERS[int(scores.argmax())] == char
                total += 1
    if total == 0:
        raise ValueError(
            f"no closing bracket at a distance in {distance}; widen the range"
        )
    return right / total


@torch.no_grad()
def gpt_probabilities(
    model: GPT, strings: Sequence[str]
) -> dict[str, torch.Tensor]:
    """Next-character probabilities of ``model`` after every prefix of
    ``strings``."""
    model.eval()
    table = {}
    for text in strings:
        ids = torch.tensor([encode(NEWLINE + text)])
        probabilities = model(ids)[0].double().softmax(-1)  # (T, V)
        for t in range(len(text) + 1):
            table[text[:t]] = probabilities[t]
    return table


@torch.no_grad()
def per_token_loss(
    model: GPT, rows: TensorDataset, batch_size: int = 1024
) -> float:
    """The exact mean cross-entropy (nats) over every counted target of
    ``rows``."""
    model.eval()
    total, count = 0.0, 0
    for inputs, targets in DataLoader(rows, batch_size=batch_size):
        logits = model(inputs)
        total += F.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), reduction="sum"
        ).item()
        count += int((targets != IGNORE).sum())
    return total / count


@torch.no_grad()
def sample_strings(
    model: GPT,
    num_strings: int,
    generator: torch.Generator,
    temperature: float = 1.0,
    top_k: int | None = None,
    greedy: bool = False,
) -> list[str | None]:
    """Strings the model writes after a newline, up to its next newline (None if
    none comes)."""
    # id 0 is the newline
    prompt = torch.zeros(num_strings, 1, dtype=torch.long)
    written = model.generate(
        prompt, model.context_length - 1, temperature, top_k, greedy, generator=generator,
        end_id=_ID[NEWLINE],
    )  # fmt: skip
    strings = []
    for row in written[:, 1:].tolist():
        text = decode(row)
        strings.append(text.split(NEWLINE)[0] if NEWLINE in text else None)
    return strings


# --------------------------------------------------------------------- training


@dataclass(frozen=True, kw_only=True)
class BracketConfig:
    """One training run on the language: the model (a :class:`GPTConfig`; the
    default is :class:`GPTConfig`'s own, width 64, 2 layers of 4 heads, learned
    positions, over the 7 characters and rows of 64) and the optimization."""

    model: GPTConfig = field(
        default_factory=lambda: GPTConfig(
            vocab_size=len(ALPHABET), context_length=64
        )
    )
    batch_size: int = 32
    lr: float = 6e-3
    weight_decay: float = 0.1
    warmup_steps: int = 30
    epochs: int = 8
    seed: int = 0


def train_brackets(
    config: BracketConfig, train_rows: TensorDataset, val_rows=None
):
    """Train a :class:`GPT` on rows of the language; return ``(model,
    history)``.

    AdamW with a cosine schedule and warm-up, next-character cross-entropy, a
    history row every 20 steps with the validation loss at the end of each
    epoch.
    """
    check.instance("config", config, BracketConfig)
    check.instance("config.model", config.model, GPTConfig)
    torch.manual_seed(config.seed)
    model = GPT(config.model)
    loader = shuffled_loader(train_rows, config.batch_size, config.seed)
    optimizer, scheduler = adamw_cosine(
        model,
        config.lr,
        config.warmup_steps,
        config.epochs * len(loader),
        config.weight_decay,
    )
    val_loader = (
        None if val_rows is None else DataLoader(val_rows, batch_size=1024)
    )
    history = fit(
        model,
        loader,
        loss_fn=token_cross_entropy,
        optimizer=optimizer,
        scheduler=scheduler,
        epochs=config.epochs,
        val_loader=val_loader,
        progress=False,
        log_every=20,
    )
    return model.eval(), history


OVERFIT = dict(
    batch_size=16, epochs=60, lr=3e-3, weight_decay=0.0, warmup_steps=20
)
"""Chapter 10's overfitting recipe: the fields of :class:`BracketConfig` that
change."""


def overfitting_run(seed: int = 0) -> tuple[GPT, pd.DataFrame, dict]:
    """Chapter 10's overfitting run: the chapter's model trained with
    :data:`OVERFIT` on 300 strings (drawn from seed 11), validated on 300 more
    (seed 12); ``seed`` sets the initialization and the batch order.

    Returns ``(model, epochs, measures)``: ``epochs``, the history's
    end-of-epoch rows; ``measures``, the epoch of the best validation loss
    (``best_epoch``), how far the validation loss ends above its minimum
    (``rise``) and above the training loss (``gap``).
    """
    config = BracketConfig(seed=seed, **OVERFIT)
    context = config.model.context_length
    train = make_rows(
        make_strings(300, torch.Generator().manual_seed(11)), context
    )
    val = make_rows(
        make_strings(300, torch.Generator().manual_seed(12)), context
    )
    model, history = train_brackets(config, train, val)
    epochs = history.dropna(subset=["val_loss"])
    last = epochs.iloc[-1]
    measures = {
        "best_epoch": int(epochs.loc[epochs["val_loss"].idxmin(), "epoch"]),
        "rise": last["val_loss"] - epochs["val_loss"].min(),
        "gap": last["val_loss"] - last["train_loss"],
    }
    return model, epochs, measures
