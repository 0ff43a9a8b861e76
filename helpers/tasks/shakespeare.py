"""A character-level language model on eight plays of Shakespeare (the GPT
chapter on real text).

The text ships with the package (``shakespeare.txt``; its provenance and licence
are in ``shakespeare.md`` beside it), so nothing is downloaded. Characters are
the tokens. The last tenth of the text is held out, by position, so the model is
measured on lines it never read. Losses are in nats per character; divide by
``ln 2`` for bits.

Shapes: ``B`` batch, ``T`` context length, ``V`` vocabulary size.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.resources import as_file as resources_path

import pandas as pd
import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from helpers import _validate as check
from helpers.gpt import GPT, GPTConfig
from helpers.tasks import shipped_file, shipped_table
from helpers.training import (
    adamw_cosine,
    evaluate,
    fit,
    token_cross_entropy,
)

__all__ = [
    "load_text",
    "CharTokenizer",
    "split_text",
    "RandomWindows",
    "held_out_windows",
    "KneserNeyModel",
    "ShakespeareConfig",
    "train_shakespeare",
    "held_out_loss",
    "words",
    "known_word_fraction",
    "attention_maps",
    "shipped_runs",
    "pretrained",
]

TEXT_FILE = "shakespeare.txt"
RUNS_FILE = "shakespeare_runs.csv"
WEIGHTS_FILE = "shakespeare_gpt.safetensors"


def load_text() -> str:
    """The eight plays as one string (1,055,123 characters), read from the
    package."""
    path = shipped_file(
        TEXT_FILE,
        "reinstall the book's helpers package from its repository (the "
        "text ships with it)",
    )
    return path.read_text(encoding="utf-8")


class CharTokenizer:
    """Characters as tokens: the sorted characters of ``text``, numbered from 0."""

    def __init__(self, text: str) -> None:
        check.instance("text", text, str)
        if not text:
            raise ValueError(
                "text is empty: pass the text to take characters from"
            )
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> Tensor:
        """``text`` as a 1-D tensor of token ids."""
        unknown = sorted(set(text) - self.index.keys())
        if unknown:
            raise ValueError(
                f"characters {unknown} are not in the vocabulary of "
                f"{self.vocab_size}: write the prompt with "
                "characters of the text"
            )
        return torch.tensor([self.index[c] for c in text], dtype=torch.long)

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """Token ids (a sequence or a 1-D tensor) back to text."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return "".join(self.chars[i] for i in ids)


def split_text(text: str, held_out: float = 0.1) -> tuple[str, str]:
    """``(train, held)``: the first ``1 - held_out`` of the text, and the rest."""
    check.probability("held_out", held_out)
    cut = round(len(text) * (1 - held_out))
    return text[:cut], text[cut:]


class RandomWindows:
    """``steps`` batches of ``B`` windows at random places in ``ids`` (a 1-D
    tensor).

    Each batch is ``(inputs, targets)``, both ``(B, T)``: the targets are the
    inputs shifted by one character. Iterating twice gives new windows (the
    generator moves on).
    """

    def __init__(
        self,
        ids: Tensor,
        context_length: int,
        batch_size: int,
        steps: int,
        generator: torch.Generator,
    ) -> None:
        check.positive_int("context_length", context_length)
        check.positive_int("batch_size", batch_size)
        check.positive_int("steps", steps)
        if ids.ndim != 1 or len(ids) <= context_length:
            raise ValueError(
                "ids must be 1-D and longer than "
                f"context_length={context_length}"
                f", got shape {tuple(ids.shape)}"
            )
        self.ids, self.context_length = ids, context_length
        self.batch_size, self.steps, self.generator = (
            batch_size,
            steps,
            generator,
        )

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        T = self.context_length
        offsets = torch.arange(T + 1)
        for _ in range(self.steps):
            starts = torch.randint(
                len(self.ids) - T,
                (self.batch_size, 1),
                generator=self.generator,
            )
            windows = self.ids[starts + offsets]  # (B, T + 1)
            yield windows[:, :-1], windows[:, 1:]


def held_out_windows(ids: Tensor, context_length: int) -> TensorDataset:
    """Non-overlapping windows of the held-out ids: each character is predicted
    once.

    A window holds ``context_length + 1`` characters: its first target (the
    second character) is predicted from one character, its last from
    ``context_length``; the last ``len(ids) - 1`` modulo ``context_length``
    characters are left out.
    """
    count = (len(ids) - 1) // context_length
    usable = ids[: count * context_length + 1]
    inputs = usable[:-1].view(count, context_length)
    targets = usable[1:].view(count, context_length)
    return TensorDataset(inputs, targets)


def held_out_loss(model: GPT, ids: Tensor, batch_size: int = 256) -> float:
    """Mean next-character cross-entropy (nats) of ``model`` on ``ids``'
    windows."""
    windows = held_out_windows(ids, model.context_length)
    loader = DataLoader(windows, batch_size=batch_size)
    return evaluate(model, loader, token_cross_entropy)["loss"]


class KneserNeyModel:
    """An interpolated Kneser-Ney character n-gram model of order ``order``.

    The probability of a character after a context of ``order - 1`` characters
    mixes the discounted count of that n-gram with the same estimate one order
    lower, down to the uniform distribution; lower orders count in how many
    contexts a string continues (its *continuation* count), not how often it
    occurs. The highest order a prediction uses counts occurrences: at the
    start of a window, where fewer than ``order - 1`` characters are known,
    that is a lower order than ``order``, with its raw counts.
    ``discount`` is the absolute discount.
    """

    def __init__(
        self,
        text: str,
        order: int,
        vocab: Sequence[str],
        discount: float = 0.75,
    ) -> None:
        check.positive_int("order", order)
        if not 0 < discount < 1:
            raise ValueError(f"discount must be in (0, 1), got {discount}")
        self.order, self.discount = order, discount
        self.vocab = list(vocab)
        self.vocab_size = len(self.vocab)
        # counts[k][context][c] for k = 1..order (context of k - 1 characters)
        self.counts: list[dict[str, Counter]] = [{} for _ in range(order + 1)]
        occurrences = Counter(
            text[i : i + order] for i in range(len(text) - order + 1)
        )
        grams: dict[str, int] = occurrences
        for k in range(order, 0, -1):
            table: dict[str, Counter] = defaultdict(Counter)
            for gram, count in grams.items():
                # the highest order counts occurrences; a lower one, for each
                # k-gram, the distinct characters seen before it (each
                # (k+1)-gram once)
                table[gram[-k:-1]][gram[-1]] += count if k == order else 1
            grams = {
                context + c: 1 for context, row in table.items() for c in row
            }
            self.counts[k] = dict(table)
        # raw[k]: occurrences of each k-gram, for a prediction whose highest
        # order is k (a context shorter than order - 1 characters)
        self.raw: list[dict[str, Counter]] = [{} for _ in range(order + 1)]
        self.raw[order] = self.counts[order]
        for k in range(1, order):
            # a k-gram occurs as the start of an order-gram, or in the text's
            # last order - k positions, where no order-gram starts
            kgrams: Counter = Counter()
            for gram, count in occurrences.items():
                kgrams[gram[:k]] += count
            kgrams.update(
                text[i : i + k]
                for i in range(max(len(text) - order + 1, 0), len(text) - k + 1)
            )
            table = defaultdict(Counter)
            for gram, count in kgrams.items():
                table[gram[:-1]][gram[-1]] += count
            self.raw[k] = dict(table)
        self.totals = [
            {h: (sum(row.values()), len(row)) for h, row in table.items()}
            for table in self.counts
        ]
        self.raw_totals = [
            {h: (sum(row.values()), len(row)) for h, row in table.items()}
            for table in self.raw
        ]

    def probability(self, context: str, char: str) -> float:
        """P(char | the last ``order - 1`` characters of context)."""
        p = 1.0 / self.vocab_size
        top = min(self.order, len(context) + 1)  # the highest order used
        for k in range(1, top + 1):
            h = context[len(context) - (k - 1) :] if k > 1 else ""
            counts, totals = (
                (self.raw[k], self.raw_totals[k])
                if k == top
                else (self.counts[k], self.totals[k])
            )
            total, distinct = totals.get(h, (0, 0))
            if total == 0:
                continue
            count = counts[h].get(char, 0)
            p = (
                max(count - self.discount, 0.0) + self.discount * distinct * p
            ) / total
        return p

    def held_out_loss(self, text: str, context_length: int) -> float:
        """Mean -log P (nats) on the characters that :func:`held_out_windows`
        scores.

        The same windows as the GPT's: each character is predicted from the
        characters before it inside its window of ``context_length``, at most
        ``order - 1`` of them.
        """
        check.positive_int("context_length", context_length)
        count = (len(text) - 1) // context_length
        if count == 0:
            raise ValueError(
                f"text of {len(text)} characters holds no window of "
                f"context_length={context_length} + 1"
            )
        total = 0.0
        for w in range(count):
            window = text[w * context_length : (w + 1) * context_length + 1]
            for j in range(1, len(window)):
                context = window[max(0, j - self.order + 1) : j]
                total -= math.log(self.probability(context, window[j]))
        return total / (count * context_length)

    def sample(
        self, prompt: str, length: int, generator: torch.Generator
    ) -> str:
        """``prompt`` continued by ``length`` characters drawn from the model."""
        check.positive_int("length", length)
        chars = self.vocab
        text = prompt
        for _ in range(length):
            context = text[max(0, len(text) - self.order + 1) :]
            weights = torch.tensor(
                [self.probability(context, c) for c in chars]
            )
            text += chars[torch.multinomial(weights, 1, generator=generator)]
        return text


def words(text: str) -> list[str]:
    """The words of ``text``: runs of letters and apostrophes, lower-cased."""
    return re.findall(r"[a-z']+", text.lower())


def known_word_fraction(text: str, vocabulary: set[str]) -> float:
    """The share of the words of ``text`` that are in ``vocabulary``."""
    found = words(text)
    if not found:
        raise ValueError("text holds no words")
    return sum(word in vocabulary for word in found) / len(found)


@torch.no_grad()
def attention_maps(model: GPT, ids: Tensor) -> Tensor:
    """The attention weights of every layer and head on ``ids (T,)``: ``(L, H,
    T, T)``."""
    check.instance("model", model, GPT)
    if ids.ndim != 1 or not 0 < len(ids) <= model.context_length:
        raise ValueError(
            f"ids must be 1-D with 1 to {model.context_length} tokens, "
            f"got shape {tuple(ids.shape)}"
        )
    inputs: list[Tensor] = []
    hooks = [
        block.self_attn.register_forward_pre_hook(
            lambda module, args: inputs.append(args[0])
        )
        for block in model.blocks
    ]
    try:
        model.eval()(ids[None])
    finally:
        for hook in hooks:
            hook.remove()
    maps = [
        block.self_attn(x, return_attention=True)[1][0]
        for block, x in zip(model.blocks, inputs, strict=True)
    ]
    return torch.stack(maps)


@dataclass(frozen=True, kw_only=True)
class ShakespeareConfig:
    """One training run: the model (a :class:`GPTConfig`) and the optimization."""

    model: GPTConfig = field(
        default_factory=lambda: GPTConfig(
            vocab_size=76,
            context_length=64,
            d_model=128,
            num_layers=2,
            num_heads=4,
            norm="layer",
            activation="gelu",
        )
    )
    batch_size: int = 24
    lr: float = 4e-3
    weight_decay: float = 0.1
    warmup_steps: int = 100
    steps: int = 3600
    evaluations: int = 5
    seed: int = 0


def _check_config(config: ShakespeareConfig) -> None:
    """A run's configuration: evaluations evenly spaced over the steps."""
    check.instance("config", config, ShakespeareConfig)
    check.positive_int("evaluations", config.evaluations)
    if config.steps % config.evaluations:
        raise ValueError(
            f"steps={config.steps} must be a multiple of "
            f"evaluations={config.evaluations}"
        )


def train_shakespeare(
    config: ShakespeareConfig,
    train_ids: Tensor,
    held_ids: Tensor,
    device: torch.device | str = "cpu",
) -> tuple[GPT, pd.DataFrame]:
    """Train the model of ``config`` on random windows; return ``(model,
    history)``.

    AdamW with warm-up and cosine decay; the held-out loss is measured
    ``evaluations`` times, evenly spaced (the ``val_loss`` column of
    :func:`helpers.training.fit`'s history). Trains on ``device``; the model
    comes back on the CPU, in eval mode.
    """
    _check_config(config)
    torch.manual_seed(config.seed)
    model = GPT(config.model)
    T = config.model.context_length
    windows = RandomWindows(
        train_ids,
        T,
        config.batch_size,
        config.steps // config.evaluations,
        torch.Generator().manual_seed(config.seed),
    )
    held = DataLoader(held_out_windows(held_ids, T), batch_size=256)
    optimizer, scheduler = adamw_cosine(
        model, config.lr, config.warmup_steps, config.steps, config.weight_decay
    )
    history = fit(
        model,
        windows,
        loss_fn=token_cross_entropy,
        optimizer=optimizer,
        scheduler=scheduler,
        epochs=config.evaluations,
        val_loader=held,
        progress=False,
        log_every=50,
        device=device,
    )
    return model.cpu().eval(), history


def shipped_runs() -> pd.DataFrame:
    """The chapter's recipe over seeds and one longer run, measured by a script.

    One row per evaluation: ``steps`` (the run's length), ``seed``, ``step``,
    ``train_loss``, ``val_loss`` (nats per character), ``threads``, ``machine``,
    ``command``.
    """
    return shipped_table(
        RUNS_FILE,
        f"python scripts/margins.py shakespeare --out helpers/tasks/{RUNS_FILE}",
    )


def pretrained(
    device: torch.device | str = "cpu",
) -> tuple[GPT, CharTokenizer]:
    """``(model, tokenizer)``: the chapter's GPT trained for longer, from the
    weights that ship with the package (``shakespeare_gpt.safetensors``).

    ``scripts/train_shakespeare_weights.py`` trained them and recorded, in
    ``shakespeare_gpt.json`` beside them, the recipe, the seed, the held-out
    loss, the commit and the machine (:func:`pretrained_record`). The model
    comes back in eval mode on ``device``; nothing is downloaded.
    """
    import json

    from safetensors.torch import load_model

    how = "reinstall the book's helpers package (the weights ship with it)"
    record = json.loads(
        shipped_file(
            WEIGHTS_FILE.replace(".safetensors", ".json"), how
        ).read_text()
    )
    model = GPT(GPTConfig(**record["recipe"]["model"]))
    with resources_path(shipped_file(WEIGHTS_FILE, how)) as path:
        load_model(model, str(path), device=str(torch.device(device)))
    tokenizer = CharTokenizer(load_text())
    return model.to(device).eval(), tokenizer


def pretrained_record() -> dict:
    """What produced the shipped weights: recipe, seed, held-out loss (nats
    per character), training time, commit, machine and command."""
    import json

    how = "reinstall the book's helpers package (the weights ship with it)"
    path = shipped_file(WEIGHTS_FILE.replace(".safetensors", ".json"), how)
    return json.loads(path.read_text())


class LastLogits(torch.nn.Module):
    """The GPT's next-token logits after the last position: ``tokens (1, T)``
    -> ``(1, V)``, the module ``scripts/export_shakespeare_onnx.py`` exports.

    Traced by ``torch.export``, the GPT's input check reads no token values
    (it does when called eagerly); the page's script only sends ids of its own
    vocabulary.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens)[:, -1]
