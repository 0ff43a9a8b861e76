"""Chapter 14's task: scikit-learn's handwritten digits, a ViT and a CNN that
compete on them.

The data are real images that ship inside scikit-learn
(``sklearn.datasets.load_digits``, no download): 1,797 grey images of 8 x 8
pixels with values 0 to 16, ten classes, about 180 of each. :func:`digits_split`
fixes one seeded split, the same in every run: 50 test images per class, and an
order of the remaining 1,297 training images in which every prefix is as
balanced over the classes as it can be, so that ``num_train=100`` means ten of
each class, and a smaller training set is always a subset of a larger one.

:func:`make_digits_cnn` is the convolutional network the Vision Transformer
(:class:`helpers.vit.VisionTransformer`) is compared with, of about the same
parameter count. :func:`train_digits` trains either on the split with one recipe
(AdamW, a warm-up and a cosine decay, a fixed number of steps whatever the
training-set size); it is a module-level function so that
:func:`helpers.parallel.run_in_processes` can run several side by side; with
``shuffled_labels`` it trains the control of the chapter's claims about
attention, a model trained on training labels permuted at random.

The shipped runs over seeds are read back as tables: :func:`seed_results` and
:func:`accuracy_over_seeds` (the accuracies, by ``scripts/margins.py digits``),
:func:`attention_results` (:func:`attention_readings` of trained,
shuffled-label and untrained ViTs, by
``scripts/margins.py digits --part attention``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import _validate as check
from helpers.tasks import shipped_table
from helpers.training import adamw_cosine, evaluate, fit
from helpers.vit import VisionTransformer, ViTConfig, patch_attention, patchify

__all__ = [
    "NUM_CLASSES",
    "TEST_PER_CLASS",
    "load_digits_images",
    "digits_split",
    "DigitsData",
    "make_digits_data",
    "make_digits_cnn",
    "DIGITS_MODELS",
    "DIGITS_VIT",
    "make_digits_model",
    "DigitsTrainConfig",
    "DigitsRun",
    "accuracy",
    "train_digits",
    "shuffle_labels",
    "SEEDS_FILE",
    "seed_results",
    "accuracy_over_seeds",
    "TOP_PATCHES",
    "focus",
    "weight_shares",
    "class_strokes",
    "attention_readings",
    "ATTENTION_FILE",
    "attention_results",
]

NUM_CLASSES = 10
TEST_PER_CLASS = 50
SPLIT_SEED = 0


def load_digits_images() -> tuple[Tensor, Tensor]:
    """All 1,797 digits as ``(images (N, 1, 8, 8) float32 in [0, 16], labels
    (N,) int64)``."""
    # imported here: only this task needs it
    from sklearn.datasets import (
        load_digits,
    )

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1)
    return images, torch.tensor(digits.target, dtype=torch.int64)


def digits_split(
    labels: Tensor, test_per_class: int = TEST_PER_CLASS, seed: int = SPLIT_SEED
):
    """A seeded split of ``range(len(labels))``: ``(train_indices,
    test_indices)``.

    ``test_per_class`` images of each class, drawn in a seeded order, go to the
    test set. The training indices are ordered round-robin over the classes, in
    the fixed class order 0 to 9 (the next image of class 0, then of class 1,
    ..., class 9, then again), the order within a class seeded; so every prefix
    is class-balanced to within one image.
    """
    check.tensor("labels", labels)
    check.positive_int("test_per_class", test_per_class)
    check.non_negative_int("seed", seed)
    generator = torch.Generator().manual_seed(seed)
    train_queues, test = [], []
    for digit in range(NUM_CLASSES):
        members = torch.nonzero(labels == digit).flatten()
        if len(members) <= test_per_class:
            raise ValueError(
                f"class {digit} has only {len(members)} images for the test set"
            )
        members = members[torch.randperm(len(members), generator=generator)]
        test.append(members[:test_per_class])
        train_queues.append(members[test_per_class:].tolist())
    train = [queue[i] for i in range(max(map(len, train_queues))) for queue in train_queues
             if i < len(queue)]  # fmt: skip
    return torch.tensor(train), torch.cat(test).sort().values


@dataclass(frozen=True)
class DigitsData:
    """The split, normalized: pixels minus ``mean``, over ``std`` (the training
    images')."""

    train_images: Tensor  # (N_train, 1, 8, 8) float32
    train_labels: Tensor  # (N_train,) int64
    test_images: Tensor  # (500, 1, 8, 8)
    test_labels: Tensor  # (500,)
    mean: float
    std: float


def make_digits_data(num_train: int | None = None) -> DigitsData:
    """The fixed split with the first ``num_train`` training images (all 1,297
    if None).

    Normalized with the mean and standard deviation of the training images used
    (one number each, over all pixels), so nothing about the test set enters
    training.
    """
    images, labels = load_digits_images()
    train, test = digits_split(labels)
    if num_train is not None:
        check.positive_int("num_train", num_train)
        if num_train > len(train):
            raise ValueError(
                f"num_train={num_train}, but the split has {len(train)} images"
            )
        train = train[:num_train]
    mean, std = images[train].mean().item(), images[train].std().item()
    normalized = (images - mean) / std
    return DigitsData(normalized[train], labels[train], normalized[test], labels[test],
                      mean, std)  # fmt: skip


# ----------------------------------------------------------------------- models


def make_digits_cnn(
    channels: tuple[int, int] = (16, 36), num_classes: int = NUM_CLASSES
):
    """A small CNN for 8 x 8 images: ``(B, 1, 8, 8) -> (B, num_classes)``.

    Two 3 x 3 convolutions at full resolution, a 2 x 2 max-pool, a third
    convolution at 4 x 4, the mean over the positions and a linear layer. Every
    unit sees a 3 x 3 neighbourhood of the layer below: locality and weight
    sharing are built in.
    """
    first, second = channels
    check.positive_int("channels", first)
    check.positive_int("channels", second)
    check.positive_int("num_classes", num_classes)
    return nn.Sequential(
        nn.Conv2d(1, first, 3, padding=1), nn.ReLU(),
        nn.Conv2d(first, second, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(second, second, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(second, num_classes),
    )  # fmt: skip


DIGITS_MODELS = ("ViT", "CNN")
DIGITS_VIT = ViTConfig()
"""The chapter's ViT: class token, learned positions, patches of 2 pixels, width
32."""


def make_digits_model(name: str, vit: ViTConfig = DIGITS_VIT) -> nn.Module:
    """``"ViT"``: :class:`VisionTransformer` with ``vit``; ``"CNN"``:
    :func:`make_digits_cnn`."""
    check.one_of("name", name, DIGITS_MODELS)
    if name == "ViT":
        return VisionTransformer(vit)
    return make_digits_cnn()


# --------------------------------------------------------------------- training


@dataclass(frozen=True, kw_only=True)
class DigitsTrainConfig:
    """The recipe of every run: ``steps`` AdamW steps of ``batch_size`` images
    (fewer if the training set is smaller), a linear warm-up over a
    ``warmup_fraction`` of them and a cosine decay."""

    steps: int = 500
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.05
    warmup_fraction: float = 0.1


@dataclass
class DigitsRun:
    """What :func:`train_digits` returns: the trained model (on the CPU, in eval
    mode, whatever device trained it) and its scores."""

    model: nn.Module
    num_train: int
    test_accuracy: float
    train_accuracy: float
    seconds: float
    history: pd.DataFrame


def accuracy(logits: Tensor, labels: Tensor) -> Tensor:
    """The fraction of rows whose arg-max is the label."""
    return (logits.argmax(dim=-1) == labels).float().mean()


def _batches(
    data: DigitsData, config: DigitsTrainConfig, generator: torch.Generator
):
    """``config.steps`` batches: passes over the training set, each in a fresh
    seeded order."""
    count = len(data.train_labels)
    size = min(config.batch_size, count)
    # whole batches per pass; the rest of a pass is dropped
    per_pass = count // size
    passes = math.ceil(config.steps / per_pass)
    order = torch.cat([torch.randperm(count, generator=generator)[: per_pass * size]
                       for _ in range(passes)])[: config.steps * size]  # fmt: skip
    return [
        (data.train_images[i], data.train_labels[i]) for i in order.split(size)
    ]


def train_digits(
    model: str = "ViT",
    seed: int = 0,
    *,
    num_train: int | None = None,
    vit: ViTConfig = DIGITS_VIT,
    config: DigitsTrainConfig = DigitsTrainConfig(),
    shuffled_labels: bool = False,
    device: str = "cpu",
) -> DigitsRun:
    """Train one model (``"ViT"`` or ``"CNN"``) on the fixed split; score it on
    the test set.

    ``seed`` sets the initialization and the order of the batches; the split is
    the same for every seed. ``num_train`` takes the first images of the
    balanced training order. With ``shuffled_labels``, the control of a claim
    about what training on the task does: the training labels are permuted at
    random (seeded by ``seed``), so the model trains on labels that say nothing
    about the images, and the recipe's steps fit them only in part (its
    training accuracy is measured on those labels, its test accuracy on the
    true ones). The returned model is on the CPU, in eval
    mode, whatever ``device`` trained it.
    """
    check.instance("config", config, DigitsTrainConfig)
    check.boolean("shuffled_labels", shuffled_labels)
    data = make_digits_data(num_train)
    check.non_negative_int("seed", seed)
    if shuffled_labels:
        data = shuffle_labels(data, seed)
    torch.manual_seed(seed)
    network = make_digits_model(model, vit)
    batches = _batches(data, config, torch.Generator().manual_seed(seed))
    warmup_steps = math.ceil(config.warmup_fraction * config.steps)
    optimizer, schedule = adamw_cosine(
        network, config.lr, warmup_steps, config.steps, config.weight_decay
    )
    start = time.perf_counter()
    history = fit(network, batches, loss_fn=nn.functional.cross_entropy, optimizer=optimizer,
                  epochs=1, scheduler=schedule,
                  device=device, progress=False, log_every=50)  # fmt: skip
    seconds = time.perf_counter() - start

    def score(images, labels):
        loader = DataLoader(TensorDataset(images, labels), batch_size=500)
        metrics = {"accuracy": accuracy}
        return evaluate(network, loader, nn.functional.cross_entropy, metrics)[
            "accuracy"
        ]

    test, train = (
        score(data.test_images, data.test_labels),
        score(data.train_images, data.train_labels),
    )
    # Back on the CPU, where the chapter's data live, whatever device trained
    # it.
    return DigitsRun(
        network.cpu().eval(),
        len(data.train_labels),
        test,
        train,
        seconds,
        history,
    )


def shuffle_labels(data: DigitsData, seed: int) -> DigitsData:
    """``data`` with its training labels permuted at random (seeded; the test
    labels stay true)."""
    generator = torch.Generator().manual_seed(SHUFFLE_SEED + seed)
    order = torch.randperm(len(data.train_labels), generator=generator)
    return dataclasses.replace(data, train_labels=data.train_labels[order])


SHUFFLE_SEED = 1000  # apart from the batch orders' seeds

SEEDS_FILE = "digits_seeds.csv"


def seed_results() -> pd.DataFrame:
    """Chapter 14's runs over seeds, as measured by
    ``scripts/margins.py digits``.

    One row per run: ``experiment`` (``"models"``, ``"size"``, ``"variant"`` or
    ``"patch"``), ``model``, ``pool``, ``positions``, ``patch_size``,
    ``num_train``, ``seed``, ``test_accuracy``, ``train_accuracy``, ``seconds``
    (training time), ``tokens``, and the ``machine`` and ``command`` that
    produced it.
    """
    return shipped_table(
        SEEDS_FILE,
        f"python scripts/margins.py digits --out helpers/tasks/{SEEDS_FILE}",
    )


VIEWS = ("models", "variants", "sizes", "patches")
POOL_NAMES = {"cls": "class token", "mean": "mean pooling"}
POSITION_NAMES = {
    "learned": "learned positions",
    "sinusoidal": "sinusoidal positions",
    "none": "no positions",
}
CURVE_NAMES = ("ViT", "ViT, patches of 4", "CNN")


def accuracy_over_seeds(
    view: str,
    value: str = "test_accuracy",
    results: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One of chapter 14's comparisons from :func:`seed_results`, a column per
    setting.

    ``"models"``: the ViT and the CNN on the whole training set, a row per
    seed. ``"variants"``: the ViT with each pooling and positions (the chapter's
    default first), a row per seed. ``"sizes"``: the ViT (patches of 2), the
    ViT with patches of 4 and the CNN, a row per (training images, seed).
    ``"patches"``: the ViT with each patch size, a row per seed. ``value`` is
    the column of :func:`seed_results` to show (``"train_accuracy"`` too).
    """
    check.one_of("view", view, VIEWS)
    table = seed_results() if results is None else results
    vits = table[table["model"] == "ViT"]
    if view == "models":
        chosen = table[table["experiment"] == "models"]
        return chosen.pivot_table(index="seed", columns="model", values=value)
    if view == "variants":
        default = vits[vits["experiment"] == "models"]
        chosen = pd.concat([default, vits[vits["experiment"] == "variant"]])
        names = (chosen["pool"].map(POOL_NAMES) + ", "
                 + chosen["positions"].map(POSITION_NAMES))  # fmt: skip
        return chosen.assign(variant=names).pivot_table(
            index="seed", columns="variant", values=value, sort=False
        )
    if view == "patches":
        chosen = vits[vits["experiment"].isin(["patch", "models"])]
        return chosen.pivot_table(
            index="seed", columns="patch_size", values=value
        )
    chosen = table[table["experiment"].isin(["models", "size", "patch"])]
    chosen = chosen[
        (chosen["model"] == "CNN") | chosen["patch_size"].isin([2, 4])
    ]
    model = chosen["model"].where(chosen["patch_size"] == 2, CURVE_NAMES[1])
    return chosen.assign(model=model).pivot_table(
        index=["num_train", "seed"], columns="model", values=value
    )[list(CURVE_NAMES)]


# ------------------------------------------------------------ reading attention

TOP_PATCHES = 4
"""The favourite patches that :func:`focus` counts (of 16, with patches of 2)."""


def weight_shares(maps: Tensor) -> Tensor:
    """Each map ``(..., G, G)`` over its sum: the share of its weight per
    patch."""
    return maps / maps.sum(dim=(-2, -1), keepdim=True)


def focus(maps: Tensor, top: int = TOP_PATCHES) -> Tensor:
    """Per map ``(..., G, G)``, the share of its weight on its ``top`` largest
    patches."""
    return weight_shares(maps).flatten(-2).topk(top, dim=-1).values.sum(-1)


def _ink(images: Tensor, patch_size: int) -> Tensor:
    """The ink of every patch, ``(B, N)``: the sum of its pixels."""
    return patchify(images, patch_size).sum(dim=-1)


def class_strokes(data: DigitsData, patch_size: int = 2) -> Tensor:
    """Where each digit differs from the others, ``(NUM_CLASSES, G, G)``.

    Per patch, from the training images: the mean ink of the digit's images
    minus the mean ink of all, in units of the ink's standard deviation over
    all, as a magnitude (more ink or less, both tell the digit). The same on
    raw or standardized pixels.
    """
    ink = _ink(data.train_images, patch_size)  # (N, G * G)
    means = torch.stack([ink[data.train_labels == digit].mean(0)
                         for digit in range(NUM_CLASSES)])  # fmt: skip
    strokes = (means - ink.mean(0)).abs() / ink.std(0)
    grid = data.train_images.shape[-1] // patch_size
    return strokes.reshape(NUM_CLASSES, grid, grid)


def _correlation(a: Tensor, b: Tensor) -> Tensor:
    """The correlation of the rows of ``a`` and ``b`` ``(B, N)``, per row."""
    a, b = a - a.mean(-1, keepdim=True), b - b.mean(-1, keepdim=True)
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))


def attention_readings(
    model: VisionTransformer, data: DigitsData
) -> dict[str, float]:
    """What chapter 14 measures of a ViT's attention, on the test images.

    ``test accuracy``; ``head focus``: the share of the weight of the class
    token's row in each head of the last block on its :data:`TOP_PATCHES`
    largest patches, averaged over heads and images; ``rollout focus``: the
    same of the rollout; ``heads apart``: the number of different favourite
    patches among the last block's heads, per image; ``wrong - right``: the
    heads' focus on the images the model gets wrong minus that on those it
    gets right; ``ink correlation``: the correlation, within an image, of the
    rollout's weight on a patch with the patch's ink; ``stroke agreement``: the
    same with :func:`class_strokes` of the image's digit, where that digit
    differs from the others. Correlations are averaged over the images.
    """
    check.instance("data", data, DigitsData)
    found = patch_attention(model, data.test_images)  # checks the model
    with torch.no_grad():
        predicted = model(data.test_images).argmax(dim=-1)
    right = predicted == data.test_labels
    last = found["heads"][:, -1]  # (B, H, G, G)
    heads = focus(last).mean(-1)  # (B,), over the heads
    favourites = last.flatten(-2).argmax(-1)  # (B, H)
    rollout = found["rollout"].flatten(1)  # (B, N)
    ink = _ink(data.test_images, model.config.patch_size)
    strokes = class_strokes(data, model.config.patch_size).flatten(1)
    return {
        "test accuracy": right.float().mean().item(),
        "head focus": heads.mean().item(),
        "rollout focus": focus(found["rollout"]).mean().item(),
        "heads apart": torch.tensor([len(set(row.tolist())) for row in favourites])
        .float().mean().item(),
        "wrong - right": (heads[~right].mean() - heads[right].mean()).item(),
        "ink correlation": _correlation(rollout, ink).mean().item(),
        "stroke agreement": _correlation(rollout, strokes[data.test_labels])
        .mean().item(),
    }  # fmt: skip


ATTENTION_FILE = "digits_attention.csv"


def attention_results() -> pd.DataFrame:
    """Chapter 14's :func:`attention_readings` over seeds, as measured by
    ``scripts/margins.py digits --part attention``.

    One row per ViT: ``kind`` (``"trained"``, ``"shuffled labels"``: trained
    the same way on training labels permuted at random, or ``"untrained"``:
    the trained one's initialization), ``seed``, ``train_accuracy`` (on the
    labels it was trained on; empty for the untrained), every reading, and the
    ``machine`` and ``command`` that produced it.
    """
    return shipped_table(
        ATTENTION_FILE,
        "python scripts/margins.py digits --part attention "
        f"--out helpers/tasks/{ATTENTION_FILE}",
    )
