"""Tests of helpers.vit (chapter 14's Vision Transformer) and helpers.tasks.digits (its task)."""

import dataclasses
import re

import pytest
import torch
from conftest import load_script

from helpers import checks
from helpers.analysis import count_parameters
from helpers.positional import sinusoidal_encoding
from helpers.tasks.digits import (
    DIGITS_MODELS,
    NUM_CLASSES,
    TEST_PER_CLASS,
    DigitsTrainConfig,
    accuracy_over_seeds,
    attention_readings,
    attention_results,
    class_strokes,
    digits_split,
    focus,
    load_digits_images,
    make_digits_cnn,
    make_digits_data,
    make_digits_model,
    seed_results,
    shuffle_labels,
    train_digits,
)
from helpers.transformer import EncoderBlock
from helpers.vit import (
    ConvPatchEmbedding,
    LinearPatchEmbedding,
    Sinusoidal2DPositionalEncoding,
    VisionTransformer,
    ViTConfig,
    attention_rollout,
    copy_patch_weights,
    patch_attention,
    patchify,
    sinusoidal_2d_encoding,
)

# --------------------------------------------------------------------------- patches


def test_patchify_cuts_square_patches_row_by_row():
    image = torch.arange(16.0).reshape(1, 1, 4, 4)
    patches = patchify(image, 2)
    assert patches.shape == (1, 4, 4)
    assert patches[0].tolist() == [
        [0, 1, 4, 5],  # top left
        [2, 3, 6, 7],  # top right
        [8, 9, 12, 13],  # bottom left
        [10, 11, 14, 15],  # bottom right
    ]


def test_patchify_orders_features_channel_then_row_then_column():
    images = torch.randn(2, 3, 6, 6)
    patches = patchify(images, 3)
    assert patches.shape == (2, 4, 27)
    torch.testing.assert_close(patches[1, 3], images[1, :, 3:, 3:].reshape(-1))


@pytest.mark.parametrize(
    ("patch_size", "channels"), [(1, 1), (2, 1), (4, 1), (2, 3)]
)
def test_conv_and_linear_patch_embeddings_are_one_map(patch_size, channels):
    torch.manual_seed(0)
    images = torch.randn(5, channels, 8, 8)
    conv = ConvPatchEmbedding(patch_size, channels, 16)
    linear = copy_patch_weights(
        conv, LinearPatchEmbedding(patch_size, channels, 16)
    )
    torch.testing.assert_close(
        linear(images), conv(images), atol=1e-5, rtol=1e-5
    )
    back = copy_patch_weights(
        linear, ConvPatchEmbedding(patch_size, channels, 16)
    )
    torch.testing.assert_close(back.proj.weight, conv.proj.weight)
    assert conv(images).shape == (5, (8 // patch_size) ** 2, 16)


def test_patch_embeddings_differ_without_copied_weights():
    """The control of the test above: two independent initializations are not equal."""
    torch.manual_seed(0)
    images = torch.randn(2, 1, 8, 8)
    conv, linear = ConvPatchEmbedding(2, 1, 16), LinearPatchEmbedding(2, 1, 16)
    assert not torch.allclose(conv(images), linear(images), atol=1e-3)


def test_copy_patch_weights_refuses_other_sizes_and_modules():
    with pytest.raises(ValueError, match="differ"):
        copy_patch_weights(
            ConvPatchEmbedding(2, 1, 16), LinearPatchEmbedding(4, 1, 16)
        )
    with pytest.raises(
        TypeError, match="LinearPatchEmbedding and ConvPatchEmbedding"
    ):
        copy_patch_weights(
            torch.nn.Linear(4, 16), LinearPatchEmbedding(2, 1, 16)
        )


# --------------------------------------------------------------------------- positions


def test_2d_sinusoidal_halves_encode_row_and_column():
    grid, width = 4, 16
    table = sinusoidal_2d_encoding(grid, width).reshape(grid, grid, width)
    axis = sinusoidal_encoding(grid, width // 2)
    for row in range(grid):
        for column in range(grid):
            torch.testing.assert_close(
                table[row, column, : width // 2], axis[row]
            )
            torch.testing.assert_close(
                table[row, column, width // 2 :], axis[column]
            )


def test_2d_sinusoidal_similarity_depends_only_on_the_offset():
    grid, width = 5, 32
    table = (
        sinusoidal_2d_encoding(grid, width).double().reshape(grid, grid, width)
    )
    for (r1, c1), (r2, c2), (dr, dc) in [
        ((0, 0), (1, 2), (2, 1)),
        ((1, 3), (0, 1), (3, 1)),
    ]:
        here = table[r1, c1] @ table[r2, c2]
        moved = table[r1 + dr, c1 + dc] @ table[r2 + dr, c2 + dc]
        torch.testing.assert_close(here, moved, atol=1e-5, rtol=1e-5)
    # ... and it does change with the offset (a row offset and a column offset count alike).
    assert not torch.isclose(
        table[0, 0] @ table[1, 2], table[0, 0] @ table[1, 3]
    )
    norms = table.reshape(-1, width).norm(dim=-1)
    torch.testing.assert_close(
        norms, torch.full_like(norms, (width / 2) ** 0.5)
    )
    unique = torch.unique(table.reshape(-1, width), dim=0)
    assert len(unique) == grid * grid, "every patch must get its own position"


def test_2d_sinusoidal_needs_a_width_divisible_by_4():
    with pytest.raises(ValueError, match="multiple of 4"):
        sinusoidal_2d_encoding(4, 30)


def test_2d_sinusoidal_positions_are_a_buffer_not_a_parameter():
    module = Sinusoidal2DPositionalEncoding(4, 16)
    assert not list(module.parameters()) and "pe" in module.state_dict()
    model = VisionTransformer(ViTConfig(positions="sinusoidal"))
    learned = VisionTransformer(ViTConfig(positions="learned"))
    assert count_parameters(learned) - count_parameters(model) == 16 * 32


# --------------------------------------------------------------------------- the model


@pytest.mark.parametrize("pool", ["cls", "mean"])
@pytest.mark.parametrize("patch_size", [1, 2, 4])
def test_shapes_of_tokens_logits_and_attention(pool, patch_size):
    config = ViTConfig(pool=pool, patch_size=patch_size)
    model = VisionTransformer(config).eval()
    images = torch.randn(3, 1, 8, 8)
    tokens = (8 // patch_size) ** 2 + (pool == "cls")
    assert config.num_tokens == tokens
    assert model.tokens(images).shape == (3, tokens, 32)
    assert model(images).shape == (3, 10)
    maps = model.attention_maps(images)
    assert len(maps) == 2 and maps[0].shape == (3, 4, tokens, tokens)
    torch.testing.assert_close(maps[1].sum(-1), torch.ones(3, 4, tokens))
    found = patch_attention(model, images)
    grid = 8 // patch_size
    assert found["heads"].shape == (3, 2, 4, grid, grid)
    assert found["rollout"].shape == (3, grid, grid)


def test_the_encoder_is_chapter_6s():
    model = VisionTransformer()
    assert all(
        isinstance(block, EncoderBlock) for block in model.encoder.blocks
    )


def test_class_token_and_mean_pooling_read_different_outputs():
    torch.manual_seed(0)
    images = torch.randn(4, 1, 8, 8)
    with_token = VisionTransformer(ViTConfig(pool="cls")).eval()
    mean = VisionTransformer(ViTConfig(pool="mean")).eval()
    assert with_token.cls_token is not None and mean.cls_token is None
    assert count_parameters(with_token) - count_parameters(mean) == 32
    encoded = with_token.encoder(with_token.tokens(images))
    torch.testing.assert_close(
        with_token(images), with_token.head(encoded[:, 0])
    )
    encoded = mean.encoder(mean.tokens(images))
    torch.testing.assert_close(mean(images), mean.head(encoded.mean(dim=1)))


def swap_patches(images):
    """Exchange the top-left and bottom-right 2 x 2 patches of 8 x 8 images."""
    swapped = images.clone()
    swapped[..., :2, :2], swapped[..., 6:, 6:] = (
        images[..., 6:, 6:],
        images[..., :2, :2],
    )
    return swapped


def test_without_positions_a_mean_pooled_vit_sees_a_bag_of_patches():
    torch.manual_seed(0)
    images = torch.randn(4, 1, 8, 8)
    bag = VisionTransformer(ViTConfig(pool="mean", positions="none")).eval()
    torch.testing.assert_close(
        bag(swap_patches(images)), bag(images), atol=1e-5, rtol=1e-5
    )
    for positions in ("learned", "sinusoidal"):
        model = VisionTransformer(
            ViTConfig(pool="mean", positions=positions)
        ).eval()
        assert not torch.allclose(
            model(swap_patches(images)), model(images), atol=1e-4
        )


# --------------------------------------------------------------------------- errors


def test_a_patch_size_that_does_not_divide_the_image_is_refused():
    with pytest.raises(
        ValueError, match=r"not divisible by patch_size=3.*\[1, 2, 4, 8\]"
    ):
        VisionTransformer(ViTConfig(patch_size=3))
    with pytest.raises(ValueError, match="not divisible"):
        patchify(torch.randn(1, 1, 8, 8), 3)
    with pytest.raises(ValueError, match="not divisible"):
        ConvPatchEmbedding(3, 1, 8)(torch.randn(1, 1, 8, 8))


@pytest.mark.parametrize(
    "embedding", [ConvPatchEmbedding, LinearPatchEmbedding]
)
@pytest.mark.parametrize(
    ("shape", "message"),
    [
        (
            (1, 1, 7, 8),
            "image size 7 is not divisible",
        ),  # a stride would drop a row
        ((1, 1, 8, 7), "image size 7 is not divisible"),  # ... or a column
        ((1, 1, 8, 6), "square images, got 8 x 6"),
        ((1, 1, 6, 8), "square images, got 6 x 8"),
    ],
)
def test_both_patch_embeddings_refuse_images_the_patches_do_not_tile(
    embedding, shape, message
):
    with pytest.raises(ValueError, match=message):
        embedding(2, 1, 8)(torch.randn(*shape))


def test_a_wrong_number_of_channels_is_refused():
    model = VisionTransformer()
    with pytest.raises(
        ValueError, match=r"built for 1 channel\(s\) but the images have 3"
    ):
        model(torch.randn(2, 3, 8, 8))
    with pytest.raises(
        ValueError, match=r"channels-last.*permute\(0, 3, 1, 2\)"
    ):
        LinearPatchEmbedding(2, 3, 8)(torch.randn(2, 8, 8, 3))
    with pytest.raises(ValueError, match="channels-last") as refused:
        model(
            torch.randn(2, 8, 8, 1)
        )  # (B, H, W, C): not a model of 8 channels
    assert "channels=8" not in str(refused.value)


def test_images_of_the_wrong_size_are_told_what_to_do():
    model = VisionTransformer()  # 8 x 8
    with pytest.raises(
        ValueError, match="crop or pad them to a square"
    ) as refused:
        model(torch.randn(2, 1, 8, 6))
    assert "image_size=8" not in str(refused.value)  # its current value
    with pytest.raises(ValueError, match="build it with image_size=16"):
        model(torch.randn(2, 1, 16, 16))


def test_an_image_without_a_batch_dimension_is_refused():
    model = VisionTransformer()
    with pytest.raises(
        ValueError, match=r"without a batch dimension.*unsqueeze\(0\)"
    ):
        model(torch.randn(1, 8, 8))
    with pytest.raises(ValueError, match=r"unsqueeze\(1\)"):
        model(torch.randn(5, 8, 8))
    with pytest.raises(ValueError, match="without a batch dimension"):
        patchify(torch.randn(3, 8, 8), 2)


def test_images_of_another_float_dtype_are_refused_at_the_vits_entry():
    """float64 images (torch.from_numpy of a NumPy array) into a float32 ViT: without the
    check, the error comes from inside conv.py and names neither the images nor the fix."""
    model = VisionTransformer()
    images = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    fix = r"images\.to\(torch\.float32\)"
    with pytest.raises(
        TypeError,
        match=rf"images has dtype torch\.float64.*VisionTransformer's "
        rf"parameters are torch\.float32.*{fix}",
    ):
        model(images)
    with pytest.raises(TypeError, match=fix):
        model.attention_maps(images)
    with pytest.raises(TypeError, match=fix):
        patch_attention(model.eval(), images)
    assert model(images.float()).shape == (2, 10)  # the fix it names works
    assert (
        model.double()(images).dtype == torch.float64
    )  # ... and so does the other


def test_other_bad_inputs_are_refused():
    model = VisionTransformer()
    with pytest.raises(TypeError, match=r"images.float\(\)"):
        model(torch.zeros(2, 1, 8, 8, dtype=torch.int64))
    with pytest.raises(ValueError, match="built for 8 x 8 images, got 16 x 16"):
        model(torch.randn(2, 1, 16, 16))
    with pytest.raises(TypeError, match="torch.Tensor"):
        model([[0.0]])
    with pytest.raises(ValueError, match="pool must be one of"):
        VisionTransformer(ViTConfig(pool="max"))
    with pytest.raises(ValueError, match="positions must be one of"):
        VisionTransformer(ViTConfig(positions="rope"))
    with pytest.raises(TypeError, match="ViTConfig"):
        VisionTransformer({"patch_size": 2})


# --------------------------------------------------------------------------- rollout


def test_rollout_of_identity_attention_is_the_identity():
    eye = torch.eye(5).expand(2, 3, 5, 5)
    torch.testing.assert_close(
        attention_rollout([eye, eye, eye]), torch.eye(5).expand(2, 5, 5)
    )


def test_rollout_of_uniform_attention_by_hand():
    """Uniform weights U (every entry 1/T) satisfy U @ U = U, so two blocks of
    A = U/2 + I/2 give A @ A = U/4 + U/2 + I/4 = 3U/4 + I/4."""
    size = 4
    uniform = torch.full((1, 2, size, size), 1 / size)
    expected = 0.75 * uniform[0, 0] + 0.25 * torch.eye(size)
    torch.testing.assert_close(
        attention_rollout([uniform, uniform])[0], expected
    )


def test_rollout_multiplies_later_blocks_on_the_left():
    first = torch.tensor([[1.0, 0.0], [1.0, 0.0]]).expand(
        1, 1, 2, 2
    )  # everyone reads token 0
    second = torch.tensor([[0.0, 1.0], [0.0, 1.0]]).expand(
        1, 1, 2, 2
    )  # everyone reads 1
    # residual 0: block 2 reads token 1, which after block 1 holds token 0: all from 0.
    torch.testing.assert_close(
        attention_rollout([first, second], residual=0.0)[0], first[0, 0]
    )


def test_rollout_rows_sum_to_one_and_heads_are_averaged():
    torch.manual_seed(0)
    maps = [torch.randn(3, 4, 6, 6).softmax(-1) for _ in range(3)]
    rollout = attention_rollout(maps)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(3, 6))
    assert (rollout >= 0).all()
    torch.testing.assert_close(
        attention_rollout(maps[:1], residual=0.0), maps[0].mean(1)
    )


def test_rollout_refuses_bad_input():
    with pytest.raises(TypeError, match="non-empty list"):
        attention_rollout([])
    with pytest.raises(ValueError, match="same shape"):
        attention_rollout([torch.rand(1, 2, 3, 3), torch.rand(1, 2, 4, 4)])
    with pytest.raises(ValueError, match="residual must be in"):
        attention_rollout([torch.rand(1, 2, 3, 3)], residual=1.5)


def test_patch_attention_reads_the_class_tokens_row():
    torch.manual_seed(0)
    model = VisionTransformer().eval()
    images = torch.randn(2, 1, 8, 8)
    maps = model.attention_maps(images)
    found = patch_attention(model, images)
    torch.testing.assert_close(
        found["heads"][:, 1, 2], maps[1][:, 2, 0, 1:].reshape(2, 4, 4)
    )
    torch.testing.assert_close(
        found["rollout"], attention_rollout(maps)[:, 0, 1:].reshape(2, 4, 4)
    )


def test_patch_attention_refuses_a_model_in_training_mode():
    model = VisionTransformer()
    with pytest.raises(ValueError, match=r"model.eval\(\)"):
        patch_attention(model, torch.randn(2, 1, 8, 8))


def test_patch_attention_with_mean_pooling_averages_the_patches_rows():
    torch.manual_seed(0)
    model = VisionTransformer(ViTConfig(pool="mean")).eval()
    images = torch.randn(2, 1, 8, 8)
    maps = model.attention_maps(images)
    found = patch_attention(model, images)
    torch.testing.assert_close(
        found["heads"][:, 0], maps[0].mean(dim=-2).reshape(2, 4, 4, 4)
    )
    torch.testing.assert_close(
        found["rollout"].sum(dim=(-2, -1)), torch.ones(2)
    )


# --------------------------------------------------------------------------- the CNN and data


def test_the_cnn_has_about_the_vits_parameter_count():
    vit, cnn = (
        count_parameters(VisionTransformer()),
        count_parameters(make_digits_cnn()),
    )
    assert abs(cnn - vit) / vit < 0.1, (cnn, vit)
    assert make_digits_cnn()(torch.randn(3, 1, 8, 8)).shape == (3, NUM_CLASSES)
    assert set(DIGITS_MODELS) == {"ViT", "CNN"}
    with pytest.raises(ValueError, match="name must be one of"):
        make_digits_model("MLP")


def test_the_digits_are_scikit_learns():
    images, labels = load_digits_images()
    assert images.shape == (1797, 1, 8, 8) and labels.shape == (1797,)
    assert images.min() == 0 and images.max() == 16
    assert sorted(labels.unique().tolist()) == list(range(NUM_CLASSES))


def test_the_split_is_fixed_disjoint_and_balanced():
    _, labels = load_digits_images()
    train, test = digits_split(labels)
    again_train, again_test = digits_split(labels)
    assert torch.equal(train, again_train) and torch.equal(test, again_test)
    assert not set(train.tolist()) & set(test.tolist())
    assert len(train) + len(test) == 1797 and len(set(train.tolist())) == len(
        train
    )
    assert (
        torch.bincount(labels[test]).tolist() == [TEST_PER_CLASS] * NUM_CLASSES
    )
    for prefix in (10, 50, 100, 300):
        counts = torch.bincount(labels[train[:prefix]], minlength=NUM_CLASSES)
        assert counts.max() - counts.min() <= 1, (prefix, counts)
    other_train, _ = digits_split(labels, seed=1)
    assert not torch.equal(train, other_train)


def test_digits_data_are_normalized_with_the_training_images():
    data = make_digits_data()
    assert data.train_images.shape == (
        1297,
        1,
        8,
        8,
    ) and data.test_images.shape == (500, 1, 8, 8)
    assert abs(data.train_images.mean().item()) < 1e-5
    assert abs(data.train_images.std().item() - 1) < 1e-5
    small = make_digits_data(num_train=100)
    assert len(small.train_labels) == 100 and torch.equal(
        small.test_labels, data.test_labels
    )
    assert torch.equal(small.train_labels, data.train_labels[:100])
    with pytest.raises(ValueError, match="num_train=5000"):
        make_digits_data(num_train=5000)


def test_train_digits_learns_something_quickly():
    quick = DigitsTrainConfig(steps=60, batch_size=64)
    run = train_digits("CNN", seed=0, num_train=200, config=quick)
    assert run.num_train == 200 and 0.5 < run.test_accuracy <= 1.0
    again = train_digits("CNN", seed=0, num_train=200, config=quick)
    assert again.test_accuracy == run.test_accuracy, (
        "a seed must give the same run"
    )
    tiny = dataclasses.replace(quick, steps=3)
    assert (
        train_digits("ViT", seed=1, num_train=20, config=tiny).num_train == 20
    )


def test_train_digits_returns_the_model_on_the_cpu_in_eval_mode(monkeypatch):
    """Whatever device trains it, the model comes back to the CPU, where the chapter's data
    are (on a GPU, calling it on CPU images would fail). Checked with a spy on Module.cpu
    everywhere, and for real on each accelerator this machine has."""
    import helpers.tasks.digits as digits

    calls = []
    make = digits.make_digits_model

    def spied(name, vit=digits.DIGITS_VIT):
        network = make(name, vit)
        to_cpu = network.cpu
        network.cpu = lambda: calls.append("cpu") or to_cpu()
        return network

    monkeypatch.setattr(digits, "make_digits_model", spied)
    tiny = DigitsTrainConfig(steps=2, batch_size=16)
    run = digits.train_digits("CNN", seed=0, num_train=20, config=tiny)
    assert calls == ["cpu"] and not run.model.training
    devices = ["cpu"] + ["cuda"] * torch.cuda.is_available()
    devices += ["mps"] * torch.backends.mps.is_available()
    for device in devices:
        run = train_digits(
            "ViT", seed=0, num_train=20, config=tiny, device=device
        )
        assert {p.device.type for p in run.model.parameters()} == {"cpu"}, (
            device
        )
        assert not run.model.training
        run.model(
            make_digits_data(20).test_images[:2]
        )  # CPU data, no device error


def test_shipped_seed_results_are_every_run_of_the_script_command():
    table = seed_results()
    assert set(table["experiment"]) == {"models", "size", "variant", "patch"}
    assert table["test_accuracy"].between(0, 1).all()
    assert table["machine"].nunique() == 1 and table["command"].nunique() == 1
    command = table["command"].iloc[0]
    seeds = int(re.search(r"--seeds (\d+)", command)[1])
    sizes = [
        int(n) for n in re.search(r"--sizes ([\d ]+?) --", command)[1].split()
    ]
    assert seeds >= 5 and sizes == [50, 100, 300]
    jobs = load_script("margins.py").digits_jobs(range(seeds), sizes)
    assert len(table) == len(jobs)
    for job, (_, row) in zip(jobs, table.iterrows(), strict=True):
        config = dataclasses.replace(ViTConfig(), **job["vit"])
        assert (row["experiment"], row["model"], row["seed"]) == (
            job["experiment"], job["model"], job["seed"])  # fmt: skip
        assert (row["pool"], row["positions"], row["patch_size"]) == (
            config.pool, config.positions, config.patch_size)  # fmt: skip
        assert row["num_train"] == (job["num_train"] or 1297)


# --------------------------------------------------------------------------- the exercise


def test_check_patchify_accepts_the_right_answer_and_explains_mistakes():
    assert checks.check_patchify(patchify).startswith("Correct")

    def strips(images, patch):
        return images.reshape(
            images.shape[0], -1, images.shape[1] * patch * patch
        )

    def channels_last(images, patch):
        batch, channels, side, _ = images.shape
        grid = side // patch
        x = images.reshape(batch, channels, grid, patch, grid, patch)
        return x.permute(0, 2, 4, 3, 5, 1).reshape(batch, grid * grid, -1)

    def column_major(images, patch):
        batch, channels, side, _ = images.shape
        grid = side // patch
        x = images.reshape(batch, channels, grid, patch, grid, patch)
        return x.permute(0, 4, 2, 1, 3, 5).reshape(batch, grid * grid, -1)

    def with_f_unfold(images, patch):
        return torch.nn.functional.unfold(
            images, patch, stride=patch
        ).transpose(1, 2)

    def with_tensor_unfold(images, patch):
        blocks = images.unfold(2, patch, patch).unfold(
            3, patch, patch
        )  # (B, C, G, G, P, P)
        batch, channels, grid = blocks.shape[:3]
        blocks = blocks.permute(0, 2, 3, 1, 4, 5)
        return blocks.reshape(batch, grid * grid, channels * patch * patch)

    for right in (patchify, with_f_unfold, with_tensor_unfold):
        assert checks.check_patchify(right).startswith("Correct"), right

    def f_unfold_untransposed(images, patch):
        return torch.nn.functional.unfold(images, patch, stride=patch)

    def tensor_unfold_channels_first(images, patch):
        blocks = images.unfold(2, patch, patch).unfold(3, patch, patch)
        batch, channels, grid = blocks.shape[:3]
        return blocks.reshape(batch, grid * grid, channels * patch * patch)

    def fixed_sizes(images, patch):  # right for one grey image only
        x = images.reshape(1, 1, 3, 2, 3, 2).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(1, 9, 4)

    def crashes(images, patch):
        return images.reshape(images.shape[0], 5, -1)

    for wrong, hint in [
        (
            f_unfold_untransposed,
            r"functional.unfold returns; transpose it with .transpose\(1, 2\)",
        ),
        (
            tensor_unfold_channels_first,
            r"Tensor.unfold .*\.permute\(0, 2, 3, 1, 4, 5\)",
        ),
        (
            fixed_sizes,
            r"RGB images: your function raised RuntimeError.*images.shape",
        ),
        (
            crashes,
            r"grey image: your function raised RuntimeError.*reshape\(B, C, G, P, G, P\)",
        ),
        (strips, "runs of consecutive pixels"),
        (channels_last, r"\(channel, row, column\)"),
        (column_major, "row by row"),
        (lambda images, patch: images, "expected shape"),
        (lambda images, patch: patchify(images, patch) + 1, "wrong pixels"),
    ]:
        with pytest.raises(AssertionError, match=hint):
            checks.check_patchify(wrong)
    with pytest.raises(TypeError, match="function itself"):
        checks.check_patchify("patchify")


# ------------------------------------------------------------- the shuffled-label control


def test_shuffled_labels_permute_the_training_labels_only():
    data = make_digits_data(num_train=200)
    shuffled = shuffle_labels(data, seed=0)
    assert torch.equal(shuffled.test_labels, data.test_labels)
    assert torch.equal(shuffled.train_images, data.train_images)
    assert torch.equal(
        shuffled.train_labels.sort().values, data.train_labels.sort().values
    )
    # a permutation of the labels, not of the pairs: most images lose their label
    assert (shuffled.train_labels != data.train_labels).float().mean() > 0.8
    assert torch.equal(
        shuffle_labels(data, 0).train_labels, shuffled.train_labels
    )
    assert not torch.equal(
        shuffle_labels(data, 1).train_labels, shuffled.train_labels
    )


def test_a_vit_on_shuffled_labels_learns_nothing_about_the_digits():
    quick = DigitsTrainConfig(steps=60, batch_size=64)
    true = train_digits("CNN", seed=0, num_train=200, config=quick)
    control = train_digits(
        "CNN", seed=0, num_train=200, config=quick, shuffled_labels=True
    )
    assert true.test_accuracy > 0.5 > 0.25 > control.test_accuracy
    with pytest.raises(TypeError, match="shuffled_labels"):
        train_digits("CNN", config=quick, shuffled_labels="yes")


def test_class_strokes_are_where_a_digit_differs_from_the_others():
    data = make_digits_data()
    strokes = class_strokes(data)
    assert strokes.shape == (NUM_CLASSES, 4, 4) and (strokes >= 0).all()
    # the same on raw pixels: standardizing is a positive affine map of the ink
    images, labels = load_digits_images()
    train, _ = digits_split(labels)
    raw = dataclasses.replace(data, train_images=images[train])
    torch.testing.assert_close(
        class_strokes(raw), strokes, rtol=1e-4, atol=1e-4
    )
    # a 0 and a 1 differ from the average digit in different places
    assert strokes[0].flatten().argmax() != strokes[1].flatten().argmax()


def test_attention_readings_of_an_untrained_vit():
    torch.manual_seed(0)
    data = make_digits_data(num_train=100)
    model = VisionTransformer().eval()
    readings = attention_readings(model, data)
    assert set(readings) == {
        "test accuracy", "head focus", "rollout focus", "heads apart",
        "wrong - right", "ink correlation", "stroke agreement",
    }  # fmt: skip
    assert 0 <= readings["test accuracy"] <= 0.3
    # focus on 4 of 16 patches: at least the even share, at most all of it
    assert 0.25 <= readings["rollout focus"] <= readings["head focus"] <= 1
    assert 1 <= readings["heads apart"] <= 4
    assert -1 <= readings["stroke agreement"] <= 1
    found = patch_attention(model, data.test_images)
    torch.testing.assert_close(
        torch.tensor(readings["head focus"]),
        focus(found["heads"][:, -1]).mean(),
    )
    with pytest.raises(TypeError, match="DigitsData"):
        attention_readings(model, data.test_images)
    with pytest.raises(ValueError, match=r"model.eval\(\)"):
        attention_readings(model.train(), data)


def test_the_shipped_attention_readings_separate_the_control():
    """The chapter's claim over the shipped seeds, and its counter-case: the head focus does
    not tell the shuffled-label ViTs from the trained ones; the stroke agreement does."""
    table = attention_results()
    assert set(table["kind"]) == {"trained", "shuffled labels", "untrained"}
    assert table.groupby("kind")["seed"].nunique().min() >= 5
    assert table["machine"].notna().all() and table["command"].notna().all()
    by_kind = {
        column: table.pivot_table(index="seed", columns="kind", values=column)
        for column in ("head focus", "stroke agreement")
    }

    def separated(column, kind, control):
        values = by_kind[column]
        return values[kind].min() > values[control].max() + 0.05

    assert separated("stroke agreement", "trained", "shuffled labels")
    assert separated("stroke agreement", "trained", "untrained")
    assert not separated("stroke agreement", "shuffled labels", "untrained")
    assert separated("head focus", "trained", "untrained")
    assert not separated("head focus", "trained", "shuffled labels")


def test_accuracy_over_seeds_gives_each_comparison_a_column_per_setting():
    models = accuracy_over_seeds("models")
    assert list(models.columns) == ["CNN", "ViT"] and len(models) >= 5
    variants = accuracy_over_seeds("variants")
    assert variants.columns[0] == "class token, learned positions"
    assert len(variants.columns) == 4
    sizes = accuracy_over_seeds("sizes")
    assert list(sizes.columns) == ["ViT", "ViT, patches of 4", "CNN"]
    assert (
        sizes.index.names == ["num_train", "seed"] and sizes.notna().all().all()
    )
    patches = accuracy_over_seeds("patches", value="train_accuracy")
    assert list(patches.columns) == [1, 2, 4]
    assert patches[2].equals(
        accuracy_over_seeds("models", value="train_accuracy")["ViT"]
    )
    with pytest.raises(ValueError, match="view must be one of"):
        accuracy_over_seeds("model")
