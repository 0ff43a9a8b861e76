"""Claims of the five source texts that the Sources and errata page (book/sources.md) corrects.

Each test runs the claim: where the text is wrong it shows the symptom, and where the page
says a claim is not a mistake it pins why. Code from the texts is ported only as far as a test
needs it, and the name of every test says what it pins.
"""

from __future__ import annotations

import ast
import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.analysis import peak_cpu_bytes
from helpers.attention import MultiHeadAttention
from helpers.positional import LearnedPositionalEmbedding, sinusoidal_encoding
from helpers.tasks.corners import make_corner_sequences
from helpers.tasks.regression import make_regression_data
from helpers.tasks.reverse import ReversePredictor, ablation_results
from helpers.transformer import TransformerConfig


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------ source 000


def _source_000_attention_weight(q, k, mask=None):
    """Source 000's ``attention_weight``: SDPA applied to an identity matrix of values."""
    v = torch.eye(k.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, mask)


def test_source_000_attention_maps_contain_no_dropout():
    """Its maps call SDPA without ``dropout_p``: the drawn weights are never dropped."""
    g = _gen(0)
    q, k = (
        torch.randn(2, 2, 16, 8, generator=g),
        torch.randn(2, 2, 16, 8, generator=g),
    )
    first, second = (
        _source_000_attention_weight(q, k),
        _source_000_attention_weight(q, k),
    )
    assert torch.equal(first, second)  # deterministic: no random dropping
    torch.testing.assert_close(first.sum(-1), torch.ones(2, 2, 16))
    torch.testing.assert_close(
        first, (q @ k.transpose(-2, -1) / math.sqrt(8)).softmax(-1)
    )
    # with dropout, the same weights would show zeros and rows that do not sum to one
    dropped = F.scaled_dot_product_attention(q, k, torch.eye(16), dropout_p=0.5)
    assert (dropped == 0).any() and not torch.allclose(
        dropped.sum(-1), torch.ones(2, 2, 16)
    )


def test_layer_norm_never_mixes_the_elements_of_a_batch():
    """LayerNorm normalizes each vector on its own; BatchNorm is the one that mixes samples."""
    g = _gen(1)
    batch = torch.randn(8, 5, 16, generator=g)
    other = batch.clone()
    other[1:] = 100 * torch.randn(
        7, 5, 16, generator=g
    )  # change every other sample
    ln = nn.LayerNorm(16)
    assert torch.equal(ln(batch)[0], ln(other)[0])
    bn = nn.BatchNorm1d(
        16
    )  # normalizes each feature over the batch (and positions)
    assert not torch.allclose(
        bn(batch.transpose(1, 2))[0], bn(other.transpose(1, 2))[0]
    )


def test_layer_norm_over_the_logits_caps_the_confidence_at_its_initial_gain():
    """With C logits normalized to mean 0 and variance 1, the largest is at most sqrt(C - 1).

    So at the initial gain (1) and bias (0), the top probability of source 000's 10 classes is
    at most e^3 / (e^3 + 9 e^(-1/3)) ~ 0.757, and the loss per token at least ~0.278, until
    training grows the gain.
    """
    classes = 10
    bound = math.exp(3) / (math.exp(3) + (classes - 1) * math.exp(-1 / 3))
    assert 0.7569 < bound < 0.7570 and 0.2784 < -math.log(bound) < 0.2785
    ln = nn.LayerNorm(classes)
    logits = 1000 * torch.randn(4096, classes, generator=_gen(2))
    assert ln(logits).softmax(-1).max() <= bound + 1e-6
    extreme = torch.tensor(
        [[9.0] + [-1.0] * (classes - 1)]
    )  # one high, the others equal
    torch.testing.assert_close(
        ln(extreme).softmax(-1).max(), torch.tensor(bound), atol=1e-4, rtol=0
    )


def test_pytorch_attention_projections_have_biases_by_default():
    """ "Biases are usually not included": PyTorch's own attention layer includes them."""
    mha = nn.MultiheadAttention(8, 2)
    assert mha.in_proj_bias is not None and mha.out_proj.bias is not None
    layer = nn.TransformerEncoderLayer(8, 2)
    assert layer.self_attn.in_proj_bias is not None
    assert (
        MultiHeadAttention(8, 2).qkv_proj.bias is None
    )  # the book's: a choice, default off


def _source_000_table(max_len: int, d_model: int) -> torch.Tensor:
    """Source 000's PositionalEncoding table (its code, not its formula)."""
    pe = torch.zeros(max_len, d_model)
    t = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
    w = torch.exp(
        -(torch.arange(0, d_model, 2).float() / d_model * math.log(10000))
    )
    pe[:, 0::2] = torch.sin(t * w)
    pe[:, 1::2] = torch.cos(t * w)
    return pe


def test_source_000_code_counts_positions_from_zero_where_its_formula_counts_from_one():
    table = _source_000_table(16, 8)
    first = table[0]
    assert torch.equal(first[0::2], torch.zeros(4)) and torch.equal(
        first[1::2], torch.ones(4)
    )
    w = 10000.0 ** (-torch.arange(0, 8, 2) / 8)
    formula_t1 = torch.stack(
        [torch.sin(w), torch.cos(w)], -1
    ).flatten()  # t = 1 of the text
    assert not torch.allclose(first, formula_t1)
    torch.testing.assert_close(
        table[1], formula_t1
    )  # row t of the code is position t
    torch.testing.assert_close(
        sinusoidal_encoding(16, 8), table
    )  # the book counts from 0


def test_the_reversal_model_is_not_a_next_token_predictor():
    """Output 0 depends on the last input token: the model reads the whole sequence."""
    torch.manual_seed(0)
    model = ReversePredictor(
        10,
        TransformerConfig(
            d_model=16, num_heads=2, num_layers=1, ffn_width=32, max_len=64
        ),
    )
    x = torch.randint(10, (1, 8), generator=_gen(3))
    changed = x.clone()
    changed[0, -1] = (x[0, -1] + 1) % 10
    assert not torch.allclose(model(x)[0, 0], model(changed)[0, 0])
    targets = x.flip(-1)
    assert not torch.equal(
        targets[:, :-1], x[:, 1:]
    )  # the targets are not the next tokens


def _source_000_sdpa(q, k, v, mask=None):
    """Source 000's ``scaled_dot_product`` (einsum scores, masked_fill with -inf, softmax)."""
    score = torch.einsum("ik, jk -> ij", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        score = score.masked_fill(mask == 0, -torch.inf)
    attention = F.softmax(score, dim=-1)
    return torch.einsum("ik, kj -> ij", attention, v), attention


def test_source_000_naive_attention_is_as_stable_as_pytorchs():
    """ "Faster and more stable": its own version is stable too (softmax subtracts the max)."""
    g = _gen(4)
    q, k, v = (
        1e4 * torch.randn(3, 2, generator=g),
        torch.randn(3, 2, generator=g),
        torch.randn(3, 4, generator=g),
    )
    mask = torch.tril(torch.ones(3, 3))
    ours, _ = _source_000_sdpa(q, k, v, mask)
    theirs = F.scaled_dot_product_attention(q, k, v, mask.bool())
    assert torch.isfinite(ours).all()
    torch.testing.assert_close(ours, theirs)


def _row_sums_normalized_over_the_queries(queries, keys, sigma):
    """Source 000's ``attention_pooling`` weights, ``k / k.sum(0)``, summed along each row."""
    d = queries.view(-1, 1) - keys.view(1, -1)
    k = torch.exp(-(d**2) / (2 * sigma**2))
    return (k / k.sum(0)).sum(1)


def test_source_000_kernel_rows_sum_to_about_keys_per_query():
    """``k / k.sum(0)``: a row sums to about the local ratio of keys to queries, not to one.

    The text's set-up (120 keys, 100 queries on [0, 10), its seed 0) gives rows of about 1.2:
    a stretched, distorted curve. Chapter 1's demonstration (80 keys, 200 queries) gives rows
    of about 0.4: a shrunken one. Normalized over the keys, both would be exactly 1.
    """
    x_train, _ = torch.sort(torch.rand(120, generator=_gen(0)) * 10)
    x = torch.arange(0, 10, 0.1)  # its 100 queries
    for sigma in (0.1, 0.3, 0.5, 1.0):  # its four widths
        rows = _row_sums_normalized_over_the_queries(x, x_train, sigma)
        assert 1.1 < rows.median() < 1.25
        assert rows.max() > 1.4 and rows.min() < 0.9  # distorted, both ways
    at_01 = _row_sums_normalized_over_the_queries(x, x_train, 0.1)
    assert at_01.min() < 0.3 and at_01.max() > 2.4
    book_keys, _ = make_regression_data(80, generator=_gen(0))
    book_rows = _row_sums_normalized_over_the_queries(
        torch.linspace(0, 10, 200), book_keys, 0.5
    )
    assert 0.35 < book_rows.median() < 0.45 and book_rows.max() < 0.9


def test_source_000_shape_comments_are_off():
    """``x = torch.randn(1, 4, 512)  # Tk = 1`` and ``w = ...  # (d_model,)``."""
    x = torch.randn(1, 4, 512)
    assert x.shape[1] == 4  # Tk is 4, not 1
    d_model, max_len = 256, 400
    t = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
    w = torch.exp(
        -(torch.arange(0, d_model, 2).float() / d_model * math.log(10000))
    )
    assert w.shape == (d_model // 2,)  # one frequency per pair of columns
    assert torch.sin(t * w).shape == (max_len, d_model // 2)
    assert _source_000_table(max_len, d_model).shape == (max_len, d_model)


def test_source_000_odd_width_fails_on_the_cosines_with_a_shape_error():
    """Sources 000 and 001 fill ``pe[:, 1::2]`` with as many cosines as there are sines."""
    # width 7: 4 sines fill columns 0::2, but 4 cosines do not fit the 3 columns 1::2
    with pytest.raises(RuntimeError, match="must match") as error:
        _source_000_table(10, 7)
    assert "d_model" not in str(error.value)
    assert _source_000_table(10, 8).shape == (10, 8)


def test_source_000_dropout_run_does_not_underfit():
    """ "The model underfits due to dropping out the attention weight of the correct key".

    Chapter 7's runs at the text's rate (dropout 0.1), shipped with the book: the accuracy a
    training curve shows (dropout on) stays low, the trained model is right on the test set.
    """
    runs = ablation_results()
    light = runs[runs["run"] == "dropout 0.1"]
    assert len(light) >= 3
    assert (light["train accuracy"] < 0.95).all()  # what the curve shows
    assert (light["test accuracy"] >= 0.999).all()  # what the model does
    # attention dropout alone (p = 0.3) on the trained models: far less lost than p
    plain = runs[runs["run"] == "plain"]
    kept = plain["attention-dropout 0.3 accuracy"]
    assert ((kept - (1 - 0.3**2)).abs() < 0.05).all()  # about p**2 lost, not p


def test_pytorchs_fused_attention_does_not_hold_the_weight_matrix():
    """Source 000's trained module calls ``F.scaled_dot_product_attention`` without a mask."""
    g, length = _gen(14), 2048
    q, k, v = (torch.randn(1, 1, length, 32, generator=g) for _ in range(3))
    weights_bytes = length * length * 4  # one float32 (T, T) matrix
    with torch.inference_mode():
        fused = peak_cpu_bytes(lambda: F.scaled_dot_product_attention(q, k, v))
        naive = peak_cpu_bytes(
            lambda: (q @ k.transpose(-2, -1) / math.sqrt(32)).softmax(-1) @ v
        )
    assert naive >= weights_bytes > 4 * fused


# ------------------------------------------------------------------------------ source 001


def _clockwise_from_points(points: torch.Tensor) -> torch.Tensor:
    """Whether each walk turns clockwise: the sign of the cross product of its first two steps."""
    a, b = points[:, 1] - points[:, 0], points[:, 2] - points[:, 1]
    return (a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]) < 0


def test_attention_plot_labels_need_the_test_directions():
    """Source 001 labels test sequences with the training split's ``directions``."""
    train, train_clockwise = make_corner_sequences(200, _gen(0))
    test, test_clockwise = make_corner_sequences(200, _gen(19))
    assert torch.equal(_clockwise_from_points(test), test_clockwise)
    assert torch.equal(_clockwise_from_points(train), train_clockwise)
    wrong = (_clockwise_from_points(test) != train_clockwise).float().mean()
    assert (
        0.3 < wrong < 0.7
    )  # the training labels are right on test points only by chance


def test_layer_norm_does_not_undo_the_input_scaling_once_the_encoding_is_added():
    """LayerNorm of the sum keeps the input's share; only LayerNorm before the sum undoes it."""
    d, g = 300, _gen(5)
    x = torch.randn(64, d, generator=g)  # standardized inputs
    pe = sinusoidal_encoding(64, d)
    ln = nn.LayerNorm(d, elementwise_affine=False)

    def share_of_input(out):
        return F.cosine_similarity(out, x, dim=-1).mean()

    scaled = math.sqrt(d) * x
    assert (
        share_of_input(ln(scaled + pe))
        > 0.99
        > 0.9
        > share_of_input(ln(x + pe))
    )
    torch.testing.assert_close(
        share_of_input(ln(scaled + pe)),
        share_of_input(scaled + pe),
        atol=0.01,
        rtol=0,
    )
    torch.testing.assert_close(
        ln(scaled), ln(x), atol=1e-4, rtol=0
    )  # it undoes it only alone


def _source_001_sequences(n=128, seed=13):
    """Source 001's ``generate_sequences`` (fixed length 4), with its own NumPy seeding."""
    basic_corners = np.array([[-1, -1], [-1, 1], [1, 1], [1, -1]])
    rng = np.random.RandomState(seed)  # the state ``np.random.seed(seed)`` sets
    bases = rng.randint(4, size=n)
    directions = rng.randint(2, size=n)
    points = [
        basic_corners[[(b + i) % 4 for i in range(4)]][:: d * 2 - 1]
        + rng.randn(4, 2) * 0.1
        for b, d in zip(bases, directions, strict=True)
    ]
    return torch.as_tensor(np.array(points)).float(), torch.as_tensor(
        directions
    )


def test_source_001_prediction_plot_pairs_training_points_with_test_directions():
    """``full_test`` holds the training points; the prediction plot gets ``test_directions``."""
    points, directions = _source_001_sequences()
    test_points, test_directions = _source_001_sequences(seed=19)
    full_test = points  # as printed: the training points
    assert torch.equal(_clockwise_from_points(points), directions.bool())
    assert torch.equal(
        _clockwise_from_points(test_points), test_directions.bool()
    )
    # the prediction plot: test directions against training points, right by chance
    paired = (
        _clockwise_from_points(full_test) == test_directions.bool()
    ).float()
    assert 0.3 < paired.mean() < 0.7
    # the attention plots: ``directions`` fits the printed ``full_test`` ...
    assert torch.equal(_clockwise_from_points(full_test), directions.bool())
    # ... and no longer fits once ``full_test`` holds the test points
    fixed = (_clockwise_from_points(test_points) == directions.bool()).float()
    assert 0.3 < fixed.mean() < 0.7


# ------------------------------------------------------------------------------ source 002


def test_a_learned_position_table_is_context_by_width_not_vocabulary_sized():
    """Source 002's model: 8 positions of width 32, a table of 256 numbers."""
    learned = LearnedPositionalEmbedding(32, 8)
    assert sum(p.numel() for p in learned.parameters()) == 8 * 32 == 256
    assert (
        sinusoidal_encoding(8, 32).numel() == 256
    )  # the stored fixed table is as large
    assert (
        50304 * 4096 // (8 * 4096) == 6288
    )  # at its 4096 width: 1/6288 of the embedding


def test_a_multiple_of_32_heads_does_not_guarantee_an_even_split():
    assert 4096 % 96 != 0 and 64 % 96 != 0  # 96 = 3 x 32 heads
    with pytest.raises(ValueError, match="divisible|divide"):
        MultiHeadAttention(
            192, 128
        )  # a multiple of 64 wide, a multiple of 32 heads


def test_multiplying_the_weights_by_a_0_1_mask_lets_the_future_in():
    """Source 002's prose: a 0/1 mask multiplied with the weights, not -inf in the scores."""
    g = _gen(15)
    q, k = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    v = torch.randn(4, 3, generator=g)
    keep = torch.tril(torch.ones(4, 4))
    k2, v2 = k.clone(), v.clone()  # a different last token: its key and value
    k2[3], v2[3] = 5 * torch.randn(8, generator=g), torch.randn(3, generator=g)

    def after_softmax(k, v):  # the weights times the mask
        return ((q @ k.T / math.sqrt(8)).softmax(-1) * keep) @ v

    def before_softmax(k, v):  # the scores times the mask: a zero is not hidden
        return ((q @ k.T / math.sqrt(8)) * keep).softmax(-1) @ v

    def scores_filled(k, v):  # what its code does
        scores = (q @ k.T / math.sqrt(8)).masked_fill(keep == 0, -math.inf)
        return scores.softmax(-1) @ v

    # position 0 may read only token 0: its output must not move with token 3
    torch.testing.assert_close(scores_filled(k, v)[0], scores_filled(k2, v2)[0])
    for wrong in (after_softmax, before_softmax):
        assert not torch.allclose(wrong(k, v)[0], wrong(k2, v2)[0], atol=1e-3)
    # after the softmax, the future key alone moves it (through the denominator)
    assert not torch.allclose(after_softmax(k, v)[0], after_softmax(k2, v)[0])
    rows = (q @ k.T / math.sqrt(8)).softmax(-1) * keep
    assert (rows.sum(-1)[:3] < 1).all()  # and the rows no longer sum to one


def test_source_002_feed_forward_sized_by_the_vocabulary_crashes_on_embeddings():
    """``eqx.nn.MLP(in_size=n_dims, out_size=n_dims, width_size=32, depth=2)``, n_dims = V."""
    vocabulary, n_embd, tokens = (
        65,
        32,
        8,
    )  # its training run: characters, N_EMBD = 32
    feedforward = nn.Sequential(  # Equinox's MLP of depth 2: two hidden layers
        nn.Linear(vocabulary, 32),
        nn.ReLU(),
        nn.Linear(32, 32),
        nn.ReLU(),
        nn.Linear(32, vocabulary),
    )
    embeddings = torch.randn(tokens, n_embd)  # what reaches it in its model
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        feedforward(embeddings)
    sized_by_the_width = nn.Sequential(
        nn.Linear(n_embd, 32), nn.ReLU(), nn.Linear(32, n_embd)
    )
    assert sized_by_the_width(embeddings).shape == (tokens, n_embd)


# ------------------------------------------------------------------------------ source 003

_SOURCE_003_FEED_FORWARD = """
class FeedForward(nn.Module):
   def __init__(self, inp_dim: int, hidden_dim_forward: int):
      super().__init__()
      self.mlp = nn.Sequential(
            nn.Linear(inp_dim, hidden_dim_feedforward),
            nn.ReLU(),
            nn.Linear(hidden_dim_feedforward, inp_dim)
      )
"""


def test_source_003_feed_forward_names_an_undefined_width():
    namespace = {"nn": nn}
    exec(_SOURCE_003_FEED_FORWARD, namespace)  # it parses ...
    with pytest.raises(NameError, match="hidden_dim_feedforward"):
        namespace["FeedForward"](16, 64)  # ... but cannot be built


_SOURCE_003_ENCODER_FORWARD = """
def forward(self, src_seq):
   for layer in self.layers:
      src_seq = layer(srq_seq)

   return src_seq
"""


def test_source_003_srq_seq_is_a_name_error_not_a_syntax_error():
    """``layer(srq_seq)`` parses; it fails only when run, on the undefined name."""
    ast.parse(_SOURCE_003_ENCODER_FORWARD)  # no SyntaxError
    namespace = {}
    exec(_SOURCE_003_ENCODER_FORWARD, namespace)

    class Encoder:
        layers = [nn.Identity()]

    with pytest.raises(NameError, match="srq_seq"):
        namespace["forward"](Encoder(), torch.zeros(1, 2, 4))
    for line in (  # the lines of the post that do not parse
        "if mask is Not None:\n   pass",
        "def get_subsequent_mask(seq)\n   pass",
        "layers = [block for _ in range(num_layers]",
        "super().__init__()'",
    ):
        with pytest.raises(SyntaxError):
            ast.parse(line)


def test_attention_computed_one_query_at_a_time_still_ignores_order():
    """Order is lost by the weighted sum over a set, not by parallel computation."""
    g = _gen(6)
    x = torch.randn(6, 4, generator=g)

    def sequential_self_attention(x):  # a Python loop, one query after another
        return torch.stack(
            [(x @ x[t] / 2).softmax(0) @ x for t in range(len(x))]
        )

    perm = torch.randperm(6, generator=g)
    torch.testing.assert_close(
        sequential_self_attention(x[perm]), sequential_self_attention(x)[perm]
    )


def test_sine_and_cosine_alternate_along_the_embedding_not_the_sequence():
    table = sinusoidal_encoding(50, 8).double()
    w = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    t = torch.arange(50, dtype=torch.float64)[:, None]
    torch.testing.assert_close(
        table[:, 0::2], torch.sin(t * w), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(
        table[:, 1::2], torch.cos(t * w), atol=1e-6, rtol=0
    )


def test_layer_norm_eps_1e_10_only_changes_nearly_constant_vectors():
    """Not a mistake: no NaN for a constant vector, the same output for ordinary vectors."""
    tiny, default = nn.LayerNorm(4, eps=1e-10), nn.LayerNorm(4)
    assert torch.equal(tiny(torch.full((1, 4), 3.0)), torch.zeros(1, 4))
    x = torch.randn(32, 4, generator=_gen(7))
    torch.testing.assert_close(tiny(x), default(x), atol=1e-3, rtol=0)
    nearly = 3.0 + 1e-4 * torch.tensor(
        [[1.0, -1.0, 1.0, -1.0]]
    )  # variance 1e-8
    assert tiny(nearly).abs().max() > 0.99  # amplified to unit variance
    assert (
        default(nearly).abs().max() < 0.04
    )  # the default eps damps it to ~0.03


def test_masking_the_weights_instead_of_the_scores_is_wrong():
    """The prose puts -1e9 in the softmax weights; the code (rightly) puts it in the scores."""
    g = _gen(8)
    scores, v = torch.randn(4, 4, generator=g), torch.randn(4, 3, generator=g)
    hide = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)
    weights = scores.masked_fill(hide, -1e9).softmax(-1)
    assert torch.equal(weights[hide], torch.zeros(int(hide.sum())))
    as_written = scores.softmax(-1).masked_fill(
        hide, -1e9
    )  # "values in softmax_weights"
    assert (as_written @ v).abs().max() > 1e6


# ------------------------------------------------------------------------------ source 004


def test_source_004_frame_calls_the_query_index_input():
    """Its long-format frame: ``product(range(n), range(n))`` against ``A.reshape(-1)``."""
    n = 5
    attention = torch.randn(n, n, generator=_gen(9)).softmax(
        -1
    )  # rows: queries
    rows = [
        (i, o, a)
        for (i, o), a in zip(
            itertools.product(range(n), range(n)),
            attention.reshape(-1).tolist(),
            strict=True,
        )
    ]
    per_input = [sum(a for i, _, a in rows if i == value) for value in range(n)]
    per_output = [
        sum(a for _, o, a in rows if o == value) for value in range(n)
    ]
    assert all(
        abs(s - 1) < 1e-6 for s in per_input
    )  # "input" indexes the queries ...
    assert not all(
        abs(s - 1) < 1e-6 for s in per_output
    )  # ... and "output" the keys


@pytest.mark.parametrize("length", [16, 1024])
def test_score_spread_grows_with_the_width_not_the_sequence_length(length):
    """Why 1/sqrt(d): q . k has variance d for unit-variance entries, whatever T is."""
    g = _gen(10)
    for d in (4, 256):
        q, k = (
            torch.randn(length, d, generator=g),
            torch.randn(length, d, generator=g),
        )
        std = (q @ k.T).std().item()
        assert 0.85 * math.sqrt(d) < std < 1.15 * math.sqrt(d)
        assert 0.85 < (q @ k.T / math.sqrt(d)).std().item() < 1.15


def test_self_attention_is_permutation_equivariant_not_invariant():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 6, 8, generator=_gen(11))
    perm = torch.randperm(6, generator=_gen(12))
    out, out_perm = mha(x, x, x), mha(x[:, perm], x[:, perm], x[:, perm])
    torch.testing.assert_close(out_perm, out[:, perm], atol=1e-6, rtol=1e-5)
    assert not torch.allclose(
        out_perm, out, atol=1e-3
    )  # the outputs move with the inputs


def test_gpt2_style_conv1d_is_a_linear_layer_on_channels_last():
    """GPT-2's "Conv1D" is ``x @ W + b`` with W of shape (in, out), applied to (B, T, C)."""
    g = _gen(13)
    x = torch.randn(2, 5, 8, generator=g)  # (B, T, C): no permutation needed
    weight, bias = torch.randn(8, 12, generator=g), torch.randn(12, generator=g)
    conv1d_gpt2 = torch.addmm(bias, x.view(-1, 8), weight).view(2, 5, 12)
    torch.testing.assert_close(conv1d_gpt2, F.linear(x, weight.T, bias))
    conv = F.conv1d(
        x.transpose(1, 2), weight.T[:, :, None], bias
    )  # a real convolution, k = 1
    torch.testing.assert_close(
        conv.transpose(1, 2), conv1d_gpt2, atol=1e-5, rtol=1e-5
    )


# François Fleuret's generator as source 004 prints it, trimmed to what the test needs.
_LENGTH, _WIDTH_MAX = 100, 11.0


def _source_004_sequences(tr, bx, noise_level=0.3):
    st = torch.arange(_LENGTH).float()[None, :, None]
    tr, bx = tr[:, None, :, :], bx[:, None, :, :]
    xtr = torch.relu(
        tr[..., 1]
        - torch.relu(torch.abs(st - tr[..., 0]) - 0.5)
        * 2
        * tr[..., 1]
        / tr[..., 2]
    )
    xbx = (
        torch.sign(
            torch.relu(
                bx[..., 1]
                - torch.abs((st - bx[..., 0]) * 2 * bx[..., 1] / bx[..., 2])
            )
        )
        * bx[..., 1]
    )
    x = torch.cat((xtr, xbx), 2)
    u = F.max_pool1d(
        x.sign().permute(0, 2, 1), kernel_size=2, stride=1
    ).permute(0, 2, 1)
    collisions = (u.sum(2) > 1).max(1).values
    y = x.max(2).values
    return y + torch.rand_like(y) * noise_level - noise_level / 2, collisions


def _source_004_generate(
    nb, group_by_locations=False, *, pass_the_flag_on=False
):
    """Its ``generate_sequences``: returns the shapes with the heights their targets use."""
    tr, bx = torch.empty(nb, 2, 3), torch.empty(nb, 2, 3)
    for shapes in (tr, bx):
        shapes[:, :, 0].uniform_(_WIDTH_MAX / 2, _LENGTH - _WIDTH_MAX / 2)
        shapes[:, :, 1].uniform_(1.0, 25.0)
        shapes[:, :, 2].uniform_(5.0, _WIDTH_MAX)
    if group_by_locations:
        a = torch.cat((tr, bx), 1)
        v = a[:, :, 0].sort(1).values[:, 2:3]
        mask_left = (a[:, :, 0] < v).float()
        h_left = (a[:, :, 1] * mask_left).sum(1) / 2
        h_right = (a[:, :, 1] * (1 - mask_left)).sum(1) / 2
        valid = (h_left - h_right).abs() > 4
    else:
        valid = (torch.abs(tr[:, 0, 1] - tr[:, 1, 1]) > 4) & (
            torch.abs(tr[:, 0, 1] - tr[:, 1, 1]) > 4
        )
    _, collisions = _source_004_sequences(tr, bx)
    if group_by_locations:
        a = torch.cat((tr, bx), 1)
        v = a[:, :, 0].sort(1).values[:, 2:3]
        mask_left = (a[:, :, 0] < v).float()
        h_left = (a[:, :, 1] * mask_left).sum(1, keepdim=True) / 2
        h_right = (a[:, :, 1] * (1 - mask_left)).sum(1, keepdim=True) / 2
        a[:, :, 1] = mask_left * h_left + (1 - mask_left) * h_right
        tr, bx = a.split(2, 1)
    else:
        tr[:, :, 1:2] = tr[:, :, 1:2].mean(1, keepdim=True)
        bx[:, :, 1:2] = bx[:, :, 1:2].mean(1, keepdim=True)
    valid = valid & ~collisions
    tr, bx = tr[valid], bx[valid]
    if tr.size(0) < nb:
        # the text calls generate_sequences(nb - input.size(0)): group_by_locations is dropped
        flag = group_by_locations and pass_the_flag_on
        tr2, bx2 = _source_004_generate(
            nb - tr.size(0), flag, pass_the_flag_on=pass_the_flag_on
        )
        tr, bx = torch.cat((tr, tr2), 0), torch.cat((bx, bx2), 0)
    return tr, bx


def test_source_004_refill_forgets_group_by_locations():
    """With ``group_by_locations=True`` the left pair and the right pair share a height."""

    def grouped(tr, bx):
        a = torch.cat((tr, bx), 1)
        heights = a[:, :, 1].gather(
            1, a[:, :, 0].argsort(1)
        )  # ordered left to right
        return (heights[:, 0] == heights[:, 1]) & (
            heights[:, 2] == heights[:, 3]
        )

    torch.manual_seed(0)
    as_written = grouped(*_source_004_generate(500, group_by_locations=True))
    torch.manual_seed(0)
    fixed = grouped(*_source_004_generate(500, True, pass_the_flag_on=True))
    assert len(as_written) == len(fixed) == 500
    assert (
        fixed.all()
    )  # passing the flag on, every sample follows the rule asked for
    assert (
        as_written.float().mean() < 0.5
    )  # as written, most come from the refill's other rule


# ------------------------------------------------------------ rows added after the 0.8.1 review


def test_source_000_output_feature_j_reads_the_jth_column_of_w_o():
    """000: "the j-th row of W^O". In Concat(h_1..h_H) W^O, output feature j is the concatenated
    heads times the j-th *column* of W^O; the j-th row gives another number."""
    g = _gen(0)
    concat = torch.randn(5, 8, generator=g, dtype=torch.float64)  # (T, H * d_h)
    w_o = torch.randn(8, 8, generator=g, dtype=torch.float64)  # not symmetric
    output = concat @ w_o
    for j in range(8):
        torch.testing.assert_close(output[:, j], concat @ w_o[:, j])
        assert not torch.allclose(output[:, j], concat @ w_o[j, :])


def test_source_002_split_into_four_keys_has_no_subkeys_3():
    """002: ``key, *subkeys = jax.random.split(key, 4)``, then ``subkeys[3]``: the split gives
    four keys, the first is taken by ``key``, so ``subkeys`` holds three (indices 0 to 2)."""
    split = list(range(4))  # jax.random.split(key, 4): four keys, in order
    key, *subkeys = split
    assert len(subkeys) == 3
    with pytest.raises(IndexError):
        subkeys[3]
    key, *subkeys = list(range(5))  # its third draft splits into five
    assert subkeys[3] == 4


def test_source_000_layer_normed_logits_are_not_probabilities():
    """000: "output probabilities of shape (B, T, C)", from a head whose logits go through a
    LayerNorm: at its initial gain and bias each row has mean 0, so it sums to 0, not 1, and
    has negative entries."""
    torch.manual_seed(0)
    head = nn.Sequential(nn.Linear(32, 10), nn.LayerNorm(10))
    outputs = head(torch.randn(2, 16, 32))  # (B, T, C)
    torch.testing.assert_close(
        outputs.sum(-1), torch.zeros(2, 16), atol=1e-5, rtol=0
    )
    assert (outputs < 0).any()
    # the probabilities are a softmax away
    torch.testing.assert_close(outputs.softmax(-1).sum(-1), torch.ones(2, 16))


def test_source_000_alibi_adds_no_parameters_at_all():
    """000: ALiBi "incurs a negligible parameter increase": its slopes are fixed, so a model
    with ALiBi has exactly the parameters of the same model without positions."""
    from helpers.gpt import GPT, GPTConfig

    config = GPTConfig(
        vocab_size=11, context_length=16, d_model=32, num_heads=4, num_layers=2
    )
    count = {
        positions: sum(
            p.numel()
            for p in GPT(config.replace(positions=positions)).parameters()
        )
        for positions in ("alibi", "none", "learned")
    }
    assert count["alibi"] == count["none"]
    assert (
        count["learned"] == count["none"] + 16 * 32
    )  # a learned table does add


def test_source_000_attention_work_grows_with_both_lengths():
    """000: "computation is efficient regardless of context sizes T_q and T_k since it involves
    only matrix operations": the matrix products do T_q T_k (2d) multiply-adds, so doubling
    both lengths quadruples the work."""
    from torch.utils.flop_counter import FlopCounterMode

    def flops(tq: int, tk: int) -> int:
        q, k, v = torch.randn(tq, 16), torch.randn(tk, 16), torch.randn(tk, 16)
        with FlopCounterMode(display=False) as counter:
            (q @ k.T / 4).softmax(-1) @ v
        return counter.get_total_flops()

    assert (
        flops(128, 128)
        == 4 * flops(64, 64)
        == 2 * (2 * 128 * 128 * 16)  # two products, 2 FLOPs a multiply-add
    )
    assert flops(64, 128) == 2 * flops(64, 64)
