"""Tests of helpers.vit (chapter 12's Vision Transformer) and helpers.tasks.digits (its task)."""

import dataclasses
import importlib.util
import re

import pytest
import torch
from conftest import ROOT

from helpers import checks
from helpers.analysis import count_parameters
from helpers.positional import sinusoidal_encoding
from helpers.tasks.digits import (
    DIGITS_MODELS,
    NUM_CLASSES,
    TEST_PER_CLASS,
    DigitsTrainConfig,
    digits_split,
    load_digits_images,
    make_digits_cnn,
    make_digits_data,
    make_digits_model,
    seed_results,
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


@pytest.mark.parametrize(("patch_size", "channels"), [(1, 1), (2, 1), (4, 1), (2, 3)])
def test_conv_and_linear_patch_embeddings_are_one_map(patch_size, channels):
    torch.manual_seed(0)
    images = torch.randn(5, channels, 8, 8)
    conv = ConvPatchEmbedding(patch_size, channels, 16)
    linear = copy_patch_weights(conv, LinearPatchEmbedding(patch_size, channels, 16))
    torch.testing.assert_close(linear(images), conv(images), atol=1e-5, rtol=1e-5)
    back = copy_patch_weights(linear, ConvPatchEmbedding(patch_size, channels, 16))
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
        copy_patch_weights(ConvPatchEmbedding(2, 1, 16), LinearPatchEmbedding(4, 1, 16))
    with pytest.raises(TypeError, match="LinearPatchEmbedding and ConvPatchEmbedding"):
        copy_patch_weights(torch.nn.Linear(4, 16), LinearPatchEmbedding(2, 1, 16))


# --------------------------------------------------------------------------- positions


def test_2d_sinusoidal_halves_encode_row_and_column():
    grid, width = 4, 16
    table = sinusoidal_2d_encoding(grid, width).reshape(grid, grid, width)
    axis = sinusoidal_encoding(grid, width // 2)
    for row in range(grid):
        for column in range(grid):
            torch.testing.assert_close(table[row, column, : width // 2], axis[row])
            torch.testing.assert_close(table[row, column, width // 2 :], axis[column])


def test_2d_sinusoidal_similarity_depends_only_on_the_offset():
    grid, width = 5, 32
    table = sinusoidal_2d_encoding(grid, width).double().reshape(grid, grid, width)
    for (r1, c1), (r2, c2), (dr, dc) in [((0, 0), (1, 2), (2, 1)), ((1, 3), (0, 1), (3, 1))]:
        here = table[r1, c1] @ table[r2, c2]
        moved = table[r1 + dr, c1 + dc] @ table[r2 + dr, c2 + dc]
        torch.testing.assert_close(here, moved, atol=1e-5, rtol=1e-5)
    # ... and it does change with the offset (a row offset and a column offset count alike).
    assert not torch.isclose(table[0, 0] @ table[1, 2], table[0, 0] @ table[1, 3])
    norms = table.reshape(-1, width).norm(dim=-1)
    torch.testing.assert_close(norms, torch.full_like(norms, (width / 2) ** 0.5))
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
    assert all(isinstance(block, EncoderBlock) for block in model.encoder.blocks)


def test_class_token_and_mean_pooling_read_different_outputs():
    torch.manual_seed(0)
    images = torch.randn(4, 1, 8, 8)
    with_token = VisionTransformer(ViTConfig(pool="cls")).eval()
    mean = VisionTransformer(ViTConfig(pool="mean")).eval()
    assert with_token.cls_token is not None and mean.cls_token is None
    assert count_parameters(with_token) - count_parameters(mean) == 32
    encoded = with_token.encoder(with_token.tokens(images))
    torch.testing.assert_close(with_token(images), with_token.head(encoded[:, 0]))
    encoded = mean.encoder(mean.tokens(images))
    torch.testing.assert_close(mean(images), mean.head(encoded.mean(dim=1)))


def swap_patches(images):
    """Exchange the top-left and bottom-right 2 x 2 patches of 8 x 8 images."""
    swapped = images.clone()
    swapped[..., :2, :2], swapped[..., 6:, 6:] = images[..., 6:, 6:], images[..., :2, :2]
    return swapped


def test_without_positions_a_mean_pooled_vit_sees_a_bag_of_patches():
    torch.manual_seed(0)
    images = torch.randn(4, 1, 8, 8)
    bag = VisionTransformer(ViTConfig(pool="mean", positions="none")).eval()
    torch.testing.assert_close(bag(swap_patches(images)), bag(images), atol=1e-5, rtol=1e-5)
    for positions in ("learned", "sinusoidal"):
        model = VisionTransformer(ViTConfig(pool="mean", positions=positions)).eval()
        assert not torch.allclose(model(swap_patches(images)), model(images), atol=1e-4)


# --------------------------------------------------------------------------- errors


def test_a_patch_size_that_does_not_divide_the_image_is_refused():
    with pytest.raises(ValueError, match=r"not divisible by patch_size=3.*\[1, 2, 4, 8\]"):
        VisionTransformer(ViTConfig(patch_size=3))
    with pytest.raises(ValueError, match="not divisible"):
        patchify(torch.randn(1, 1, 8, 8), 3)
    with pytest.raises(ValueError, match="not divisible"):
        ConvPatchEmbedding(3, 1, 8)(torch.randn(1, 1, 8, 8))


def test_a_wrong_number_of_channels_is_refused():
    model = VisionTransformer()
    with pytest.raises(ValueError, match=r"built for 1 channel\(s\) but the images have 3"):
        model(torch.randn(2, 3, 8, 8))
    with pytest.raises(ValueError, match="channels last"):
        LinearPatchEmbedding(2, 3, 8)(torch.randn(2, 8, 8, 3))


def test_an_image_without_a_batch_dimension_is_refused():
    model = VisionTransformer()
    with pytest.raises(ValueError, match=r"without a batch dimension.*unsqueeze\(0\)"):
        model(torch.randn(1, 8, 8))
    with pytest.raises(ValueError, match=r"unsqueeze\(1\)"):
        model(torch.randn(5, 8, 8))
    with pytest.raises(ValueError, match="without a batch dimension"):
        patchify(torch.randn(3, 8, 8), 2)


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
    torch.testing.assert_close(attention_rollout([eye, eye, eye]), torch.eye(5).expand(2, 5, 5))


def test_rollout_of_uniform_attention_by_hand():
    """Uniform weights U (every entry 1/T) satisfy U @ U = U, so two blocks of
    A = U/2 + I/2 give A @ A = U/4 + U/2 + I/4 = 3U/4 + I/4."""
    size = 4
    uniform = torch.full((1, 2, size, size), 1 / size)
    expected = 0.75 * uniform[0, 0] + 0.25 * torch.eye(size)
    torch.testing.assert_close(attention_rollout([uniform, uniform])[0], expected)


def test_rollout_multiplies_later_blocks_on_the_left():
    first = torch.tensor([[1.0, 0.0], [1.0, 0.0]]).expand(1, 1, 2, 2)  # everyone reads token 0
    second = torch.tensor([[0.0, 1.0], [0.0, 1.0]]).expand(1, 1, 2, 2)  # everyone reads 1
    # residual 0: block 2 reads token 1, which after block 1 holds token 0: all from 0.
    torch.testing.assert_close(attention_rollout([first, second], residual=0.0)[0], first[0, 0])


def test_rollout_rows_sum_to_one_and_heads_are_averaged():
    torch.manual_seed(0)
    maps = [torch.randn(3, 4, 6, 6).softmax(-1) for _ in range(3)]
    rollout = attention_rollout(maps)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(3, 6))
    assert (rollout >= 0).all()
    torch.testing.assert_close(attention_rollout(maps[:1], residual=0.0), maps[0].mean(1))


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
    torch.testing.assert_close(found["heads"][:, 1, 2], maps[1][:, 2, 0, 1:].reshape(2, 4, 4))
    torch.testing.assert_close(found["rollout"], attention_rollout(maps)[:, 0, 1:].reshape(2, 4, 4))


# --------------------------------------------------------------------------- the CNN and data


def test_the_cnn_has_about_the_vits_parameter_count():
    vit, cnn = count_parameters(VisionTransformer()), count_parameters(make_digits_cnn())
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
    assert len(train) + len(test) == 1797 and len(set(train.tolist())) == len(train)
    assert torch.bincount(labels[test]).tolist() == [TEST_PER_CLASS] * NUM_CLASSES
    for prefix in (10, 50, 100, 300):
        counts = torch.bincount(labels[train[:prefix]], minlength=NUM_CLASSES)
        assert counts.max() - counts.min() <= 1, (prefix, counts)
    other_train, _ = digits_split(labels, seed=1)
    assert not torch.equal(train, other_train)


def test_digits_data_are_normalized_with_the_training_images():
    data = make_digits_data()
    assert data.train_images.shape == (1297, 1, 8, 8) and data.test_images.shape == (500, 1, 8, 8)
    assert abs(data.train_images.mean().item()) < 1e-5
    assert abs(data.train_images.std().item() - 1) < 1e-5
    small = make_digits_data(num_train=100)
    assert len(small.train_labels) == 100 and torch.equal(small.test_labels, data.test_labels)
    assert torch.equal(small.train_labels, data.train_labels[:100])
    with pytest.raises(ValueError, match="num_train=5000"):
        make_digits_data(num_train=5000)


def test_train_digits_learns_something_quickly():
    quick = DigitsTrainConfig(steps=60, batch_size=64)
    run = train_digits("CNN", seed=0, num_train=200, config=quick)
    assert run.num_train == 200 and 0.5 < run.test_accuracy <= 1.0
    again = train_digits("CNN", seed=0, num_train=200, config=quick)
    assert again.test_accuracy == run.test_accuracy, "a seed must give the same run"
    tiny = dataclasses.replace(quick, steps=3)
    assert train_digits("ViT", seed=1, num_train=20, config=tiny).num_train == 20


def load_script():
    path = ROOT / "scripts" / "reproduce_digits.py"
    spec = importlib.util.spec_from_file_location("reproduce_digits", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_seed_results_are_every_run_of_the_script_command():
    table = seed_results()
    assert set(table["experiment"]) == {"models", "size", "variant", "patch"}
    assert table["test_accuracy"].between(0, 1).all()
    assert table["machine"].nunique() == 1 and table["command"].nunique() == 1
    command = table["command"].iloc[0]
    seeds = int(re.search(r"--seeds (\d+)", command)[1])
    sizes = [int(n) for n in re.search(r"--sizes ([\d ]+?) --", command)[1].split()]
    assert seeds >= 5 and sizes == [50, 100, 300]
    jobs = load_script().jobs(seeds, sizes)
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
        return images.reshape(images.shape[0], -1, images.shape[1] * patch * patch)

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

    for wrong, hint in [
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
