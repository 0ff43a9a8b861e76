"""The package's argument and tensor checks: where they live, and how they fail.

Where a check lives:

* here, every *generic* check (a kind of number, a tensor's shape or dtype, a
  choice among names with :func:`one_of`, an instance of a class with
  :func:`instance`, a callable with :func:`function`), written once;
  ``tests/test_structure.py`` fails if another module writes one of these
  messages itself;
* here too, a check that two or more places call (a token tensor, a mask, a
  cache's window);
* beside its code, a check with one caller: a private ``_check_<name>`` at the
  end of the module that calls it (the GPT's input, cache and generation checks
  in ``helpers.gpt``, ``fit``'s in ``helpers.training``, the decoder's in
  ``helpers.transformer``), so that a shown class is still its computation plus
  one line of checks, and the check reads next to what it protects;
  ``tests/test_structure.py`` fails on a check here that has one caller
  elsewhere. ``helpers.interop``'s comparisons of foreign modules and a task's
  own data and layer rules (as in ``helpers.tasks.shapes``) sit beside their
  code too.

A check only checks: it raises, or it returns None. It never hands back a
converted value, a default or a reshaped tensor; what a value becomes (the
position a cache continues from, a default padding token) is computed in the
code that uses it, where a chapter shows it (``tests/test_structure.py`` fails
on a ``return <value>`` here or in a ``_check_<name>``). One rule lives here
because the checks and the kernel must read a mask alike:
:func:`mask_for_scores`, the 3-D mask rule, which the attention kernel calls
too.

A value is checked once, where it enters the package (a constructor, a public
function, the first line of a ``forward``). One rule for the exception type:

* ``TypeError``: the value is of the wrong kind (a float where an int is needed,
  a string where a number is, a class where an instance is, an int64 tensor
  where a float one is);
* ``ValueError``: the kind is right, the value is not (a negative width, a wrong
  shape, a mask in the opposite convention).

Every message says what was wrong and how to fix it.
"""

from __future__ import annotations

import math
import numbers
import weakref
from collections.abc import Iterable, Mapping

import torch
from torch import Tensor, nn

# ---------------------------------------------------------------------- numbers


def describe(value) -> str:
    return f"{type(value).__name__} ({value!r})"


def _broadcasts_to(shape: torch.Size, target: torch.Size) -> bool:
    """Whether a tensor of ``shape`` broadcasts to ``target`` without growing it."""
    try:
        return torch.broadcast_shapes(shape, target) == target
    except RuntimeError:
        return False


def positive_int(name: str, value) -> None:
    """An int >= 1: TypeError unless it is an int (not a bool), ValueError if
    < 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be a positive int, got {describe(value)}; "
            f"pass e.g. {name}=8"
        )
    if value < 1:
        raise ValueError(
            f"{name} must be a positive int, got {value}; pass a value >= 1"
        )


def non_negative_int(name: str, value) -> None:
    """An int >= 0 (TypeError / ValueError as :func:`positive_int`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be a non-negative int, got {describe(value)}"
        )
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def real(name: str, value) -> None:
    """A finite number: TypeError for strings, bools and other non-numbers."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a number, got {describe(value)}; pass an int or a "
            f"float, not a {type(value).__name__}"
        )
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")


def positive_number(name: str, value, hint: str = "") -> None:
    """A finite number > 0 (TypeError for non-numbers, ValueError otherwise)."""
    real(name, value)
    if value <= 0:
        raise ValueError(
            f"{name} must be > 0, got {float(value)}"
            + (f"; {hint}" if hint else "")
        )


def non_negative_number(name: str, value, hint: str = "") -> None:
    """A finite number >= 0."""
    real(name, value)
    if value < 0:
        raise ValueError(
            f"{name} must be >= 0, got {float(value)}"
            + (f"; {hint}" if hint else "")
        )


def probability(
    name: str, value, hint: str = "use 0.0 to switch it off"
) -> None:
    """A number in [0, 1): TypeError for non-numbers, ValueError outside."""
    real(name, value)
    if not 0.0 <= value < 1.0:
        raise ValueError(
            f"{name} must be in [0, 1), got {float(value)}; {hint}"
        )


def boolean(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {describe(value)}")


def head_width(d_model, num_heads) -> None:
    """A multi-head layer's sizes: ``num_heads`` divides ``d_model``, each head
    gets ``d_model // num_heads`` features."""
    positive_int("d_model", d_model)
    positive_int("num_heads", num_heads)
    if d_model % num_heads:
        divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}; "
            "each head gets d_model / num_heads features, so pick "
            f"num_heads among {divisors}"
        )


# ---------------------------------------------------------------------- tensors


def tensor(
    name: str, value, *, floating: bool = False, min_ndim: int = 0
) -> None:
    """A tensor (of a float dtype if ``floating``) of >= ``min_ndim`` dims."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(value).__name__}"
        )
    if floating and not value.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor, got dtype {value.dtype}; "
            f"convert it with {name}.float()"
        )
    if value.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions, got shape "
            f"{tuple(value.shape)}"
        )


def same_dtype(**tensors: Tensor) -> None:
    dtypes = [t.dtype for t in tensors.values()]
    if len(set(dtypes)) > 1:
        first = next(iter(tensors))
        raise TypeError(
            f"{', '.join(tensors)} must share a dtype, got "
            f"{', '.join(map(str, dtypes))}; "
            f"convert them with .to({first}.dtype)"
        )


def module_dtype(name: str, x: Tensor, module: nn.Module) -> None:
    """TypeError unless ``x`` has the dtype of ``module``'s parameters (float64
    into float32)."""
    parameter = next(module.parameters(), None)
    if parameter is not None and x.dtype != parameter.dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but {type(module).__name__}'s "
            f"parameters are {parameter.dtype}; convert the input with "
            f"{name}.to({parameter.dtype}) or the module with .to({x.dtype})"
        )


def sequence(
    name: str, x, d_model: int, who: str, max_len: int | None = None
) -> None:
    """A float ``(B, T, D)`` batch of sequences with ``D == d_model`` (and ``T
    <= max_len``)."""
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{who} expects a torch.Tensor of shape (B, T, D), got "
            f"{type(x).__name__}"
        )
    if not x.is_floating_point():
        raise TypeError(
            f"{who} expects a floating-point {name}, got dtype {x.dtype}; "
            "token ids go through "
            f"an nn.Embedding first, other numbers through {name}.float()"
        )
    if x.ndim != 3:
        raise ValueError(
            f"{who} expects {name} of shape (B, T, D={d_model}), got "
            f"{tuple(x.shape)}; add a batch dimension with {name}.unsqueeze(0) "
            "if you have a single sequence"
        )
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{who} was built for d_model={d_model} but {name} has width "
            f"{x.shape[-1]} (shape {tuple(x.shape)}); project it to {d_model} "
            f"features first, or build the module with d_model={x.shape[-1]}"
        )
    if max_len is not None and x.shape[1] > max_len:
        raise ValueError(
            f"sequence length T={x.shape[1]} exceeds max_len={max_len} of "
            f"{who}; build it with max_len >= {x.shape[1]} or cut the sequence"
        )


def attention_inputs(query, key, value, d_model: int, who: str) -> None:
    """A multi-head layer's query ``(B, Tq, D)``, key and value ``(B, Tk, D)``."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        sequence(name, x, d_model, who)
    same_dtype(query=query, key=key, value=value)
    if key.shape[1] != value.shape[1]:
        raise ValueError(
            "key and value must have the same length Tk, got key "
            f"{tuple(key.shape)} and "
            f"value {tuple(value.shape)}; each key needs exactly one value"
        )
    if not query.shape[0] == key.shape[0] == value.shape[0]:
        raise ValueError(
            "query, key and value must have the same batch size, got "
            f"{query.shape[0]}, "
            f"{key.shape[0]} and {value.shape[0]}"
        )


def vector(name: str, value) -> None:
    """A 1-D tensor (one scalar per point)."""
    tensor(name, value)
    if value.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D (one scalar per point), got shape "
            f"{tuple(value.shape)}; "
            "flatten it with .reshape(-1)"
        )


def pairs(keys, values) -> None:
    """Keys and values of kernel regression: 1-D tensors of the same length."""
    vector("keys", keys)
    vector("values", values)
    if keys.shape != values.shape:
        raise ValueError(
            f"keys and values must pair up one to one, got {tuple(keys.shape)} "
            f"keys and {tuple(values.shape)} values"
        )


def kernel_width(width) -> None:
    """A kernel width: a number or tensor, every entry > 0."""
    if not isinstance(width, Tensor):
        real("width", width)
    values = (
        width.detach()
        if isinstance(width, Tensor)
        else torch.tensor(float(width))
    )
    if not (values > 0).all():  # NaN fails this test too
        raise ValueError(
            f"width must be > 0, got {width}; a kernel of width 0 is a hard "
            "lookup, use nearest_neighbour for that"
        )


def generator(value) -> None:
    if not isinstance(value, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator, got {type(value).__name__}; "
            "pass torch.Generator().manual_seed(0)"
        )


def tokens(value, vocab_size: int, max_len: int | None = None) -> None:
    """Token ids: an int64 ``(B, T)`` tensor with values in ``0 .. vocab_size -
    1``."""
    if not isinstance(value, Tensor):
        raise TypeError(
            "tokens must be an int64 tensor of shape (B, T), got a "
            f"{type(value).__name__}; make one with torch.tensor([ids]) (a "
            "batch of one sequence) or torch.tensor([ids_1, ids_2, ...])"
        )
    if value.dtype != torch.long:
        raise TypeError(
            f"tokens must be an int64 tensor of shape (B, T), got {value.dtype}; "
            "convert with tokens.long()"
        )
    if value.ndim != 2:
        raise ValueError(
            f"tokens must have shape (B, T), got {tuple(value.shape)}; "
            "add a batch dimension with tokens.unsqueeze(0)"
        )
    # One read of a value back to the host, and none while torch.export or
    # torch.compile traces the model (a value is not known then).
    if not torch.compiler.is_compiling() and bool(
        ((value < 0) | (value >= vocab_size)).any()
    ):
        raise ValueError(
            f"tokens must lie in 0 .. {vocab_size - 1}, got values from "
            f"{int(value.min())} to {int(value.max())}"
        )
    if max_len is not None and value.shape[1] > max_len:
        raise ValueError(
            f"the sequence has T={value.shape[1]} tokens, more than the "
            "model's context of "
            f"{max_len}; cut it to the last {max_len} tokens"
        )


def logits_targets(logits, targets) -> None:
    """Per-token logits ``(B, T, C)`` and integer targets ``(B, T)``."""
    if not isinstance(logits, Tensor) or not isinstance(targets, Tensor):
        raise TypeError(
            "logits and targets must be tensors of shapes (B, T, C) and (B, T)"
        )
    if logits.ndim != 3 or logits.shape[:2] != targets.shape:
        raise ValueError(
            "logits must be (B, T, C) and targets (B, T), got "
            f"{tuple(logits.shape)} and "
            f"{tuple(targets.shape)}"
        )


# ------------------------------------------------------------------------ masks


def bool_mask(value) -> None:
    """A boolean tensor; float masks are refused because 0/1 and 0/-inf masks
    look alike."""
    if not isinstance(value, Tensor):
        raise TypeError(
            "mask must be a boolean torch.Tensor or None, got "
            f"{type(value).__name__}"
        )
    if value.dtype != torch.bool:
        raise TypeError(
            "mask must be boolean (True = may attend), got dtype "
            f"{value.dtype}. For a 0/1 indicator mask pass mask.bool(); for an "
            "additive mask of 0 and -inf pass (mask == 0)"
        )


def mask_for_scores(mask: Tensor | None, scores_ndim: int) -> Tensor | None:
    """The package's one 3-D mask rule: against per-head scores (B, H, Tq, Tk)
    (``scores_ndim == 4``) a 3-D mask is (B, Tq, Tk), one mask per sequence
    shared by the heads, read as ``mask[:, None]`` (B, 1, Tq, Tk); any other
    mask (or None) is returned as it is, to broadcast from the right.

    Not a check: the attention kernel and the mask checks both read a mask
    through it, so they agree on its shape.
    """
    if mask is not None and mask.ndim == 3 and scores_ndim == 4:
        return mask[:, None]
    return mask


# Masks whose values passed the check below: id -> (a weak reference, the
# tensor's version). Each layer of a stack is handed the same mask; its values
# are read back to the host once, not once per layer (an in-place change bumps
# the version, and the mask is read again).
_MASKS_READ: dict[int, tuple] = {}


def _values_read_before(value) -> bool:
    entry = _MASKS_READ.get(id(value))
    return (
        entry is not None and entry[0]() is value and entry[1] == value._version
    )


def _remember_values_read(value) -> None:
    # a tensor made in inference mode keeps no version: it is read each time
    if value.is_inference():
        return
    if len(_MASKS_READ) > 64:
        _MASKS_READ.clear()
    _MASKS_READ[id(value)] = (weakref.ref(value), value._version)


def attention_mask(value, scores_shape: torch.Size) -> None:
    """A boolean mask (True = may attend) that broadcasts to ``scores_shape``
    (..., Tq, Tk).

    Also refuses the one mask of the opposite convention that can be recognized
    for sure: exactly PyTorch's causal mask ``torch.triu(ones, 1)`` (True =
    blocked), which read as True = may attend blocks every query from itself and
    leaves the last query no key. That test reads the mask back to the host: once
    per mask (not once per layer that receives it), and not while torch.export or
    torch.compile traces.
    """
    bool_mask(value)
    if not _broadcasts_to(value.shape, scores_shape):
        raise ValueError(
            f"mask of shape {tuple(value.shape)} cannot broadcast to the "
            f"attention scores of shape {tuple(scores_shape)} (..., Tq, Tk). "
            "Use a (Tq, Tk) mask, or add size-1 dimensions where it is "
            "shared: with per-head scores (B, H, Tq, Tk) a 3-D mask is read "
            "as (B, Tq, Tk); write a per-head mask shared by the batch "
            "as (1, H, Tq, Tk)"
        )
    size = value.shape[-1]
    if (
        value.ndim >= 2
        and size > 1
        and value.shape[-2] == size
        and not torch.compiler.is_compiling()
        and not _values_read_before(value)
    ):
        pytorch_causal = torch.ones(
            size, size, dtype=torch.bool, device=value.device
        ).triu(1)
        if bool((value == pytorch_causal).all()):
            raise ValueError(
                "this mask is PyTorch's causal mask torch.triu(ones, 1), "
                "where True means 'blocked'; read as this package's True = "
                "may attend it lets every query see only the future and "
                "leaves the last query no key at all. Pass ~mask, or build it "
                "with helpers.masks.causal_mask(T)"
            )
        _remember_values_read(value)


# -------------------------------------------------------------------- attention

DROPOUT_HINT = "0 turns dropout off, and 1 would drop every attention weight"
SCALE_HINT = (
    "it multiplies q @ k^T (0 would make every weight uniform, a negative "
    "scale would favour "
    "the least similar keys), and None means 1 / sqrt(d)"
)


def attention_arguments(
    q, k, v, mask, dropout_p, training, scale, *, bias=None
) -> None:
    """scaled_dot_product_attention's arguments: q (..., Tq, d), k (..., Tk,
    d), v (..., Tk, dv) of one dtype, a mask that fits the scores (a 3-D mask
    against 4-D scores read as (B, Tq, Tk), shared by the heads), a float bias
    that broadcasts to them."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        tensor(name, x, floating=True, min_ndim=2)
    same_dtype(q=q, k=k, v=v)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            "queries and keys must have the same width d, got q "
            f"{tuple(q.shape)} and "
            f"k {tuple(k.shape)}; project them to a common width first"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            "keys and values must have the same length Tk, got k "
            f"{tuple(k.shape)} and "
            f"v {tuple(v.shape)}; each key needs exactly one value"
        )
    try:
        batch_shape = torch.broadcast_shapes(
            q.shape[:-2], k.shape[:-2], v.shape[:-2]
        )
    except RuntimeError:
        raise ValueError(
            f"the leading (batch) dimensions of q {tuple(q.shape)}, k "
            f"{tuple(k.shape)} and "
            f"v {tuple(v.shape)} do not broadcast together"
        ) from None
    probability("dropout_p", dropout_p, DROPOUT_HINT)
    boolean("training", training)
    if scale is not None:
        positive_number("scale", scale, SCALE_HINT)
    if mask is not None:
        scores_shape = torch.Size((*batch_shape, q.shape[-2], k.shape[-2]))
        bool_mask(mask)
        attention_mask(mask_for_scores(mask, q.ndim), scores_shape)
    if bias is not None:
        scores_shape = torch.Size((*batch_shape, q.shape[-2], k.shape[-2]))
        tensor("bias", bias, floating=True)
        same_dtype(q=q, bias=bias)
        if not _broadcasts_to(bias.shape, scores_shape):
            raise ValueError(
                f"bias of shape {tuple(bias.shape)} cannot broadcast to the "
                f"attention scores of shape {tuple(scores_shape)} (..., Tq, "
                "Tk); it is added to them, aligned from the right: give it "
                "size-1 dimensions where it is shared"
            )


def multi_head_inputs(layer, query, key, value, mask) -> None:
    """A multi-head layer's inputs, and a mask (Tq, Tk), (B, Tq, Tk) or (B|1,
    H|1, Tq, Tk) that fits its scores (B, H, Tq, Tk)."""
    who = type(layer).__name__
    attention_inputs(query, key, value, layer.d_model, who)
    module_dtype("query", query, layer)
    if mask is None:
        return
    bool_mask(mask)
    if mask.ndim not in (2, 3, 4):
        raise ValueError(
            "mask must be 2-D (Tq, Tk), 3-D (B, Tq, Tk) or 4-D (B, H, Tq, "
            f"Tk), got shape {tuple(mask.shape)}"
        )
    scores = torch.Size(
        (query.shape[0], layer.num_heads, query.shape[1], key.shape[1])
    )
    attention_mask(mask_for_scores(mask, len(scores)), scores)


# --------------------------------------------------------------------- training


def module(value) -> None:
    if not isinstance(value, nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module, got {type(value).__name__}; "
            "wrap plain functions in an nn.Module"
        )


def loader(name: str, value) -> None:
    if isinstance(value, Tensor) or not isinstance(value, Iterable):
        raise TypeError(
            f"{name} must be an iterable of (inputs..., target) batches such "
            f"as a torch.utils.data.DataLoader, got {type(value).__name__}; "
            "wrap tensors with DataLoader(TensorDataset(x, y), batch_size=...)"
        )


def loss_function(value) -> None:
    if isinstance(value, type):
        raise TypeError(
            "loss_fn must be a loss function or an instance of a loss class, "
            f"got the class {value.__name__} itself; call it: "
            f"loss_fn={value.__name__}()"
        )
    if not callable(value):
        raise TypeError(
            "loss_fn must be callable, e.g. nn.MSELoss(), got "
            f"{type(value).__name__}"
        )


def optimizer_of(value, for_model: nn.Module | None = None) -> None:
    """An optimizer; with ``for_model``, one that updates at least one of its
    parameters."""
    if not isinstance(value, torch.optim.Optimizer):
        raise TypeError(
            "optimizer must be a torch.optim.Optimizer, got "
            f"{type(value).__name__}; "
            "e.g. torch.optim.AdamW(model.parameters(), lr=1e-3)"
        )
    if for_model is not None:
        mine = {id(p) for p in for_model.parameters()}
        theirs = {
            id(p) for group in value.param_groups for p in group["params"]
        }
        if mine and not mine & theirs:
            raise ValueError(
                "the optimizer holds none of this model's parameters (was it "
                "built for another model, or before the model was rebuilt?), "
                "so training would change nothing; build it with "
                "torch.optim.AdamW(model.parameters(), ...)"
            )


def metric_functions(value) -> None:
    """None, or a dict ``{name: fn(output, target)}``."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise TypeError(
            f"metrics must be a dict {{name: fn(output, target)}}, got "
            f"{type(value).__name__}"
        )
    for name, metric in value.items():
        if (
            not isinstance(name, str)
            or not name.isidentifier()
            or name == "loss"
        ):
            raise ValueError(
                "metric names must be identifiers other than 'loss', got "
                f"{name!r}; rename it, e.g. 'accuracy'"
            )
        if not callable(metric):
            raise TypeError(
                f"metric {name!r} must be callable, got {type(metric).__name__}"
            )


def model_output(output) -> None:
    """A model's output as ``fit`` and ``evaluate`` need it: one tensor."""
    if isinstance(output, tuple):
        raise TypeError(
            f"the model returned a tuple of {len(output)} items (e.g. output "
            "and attention weights); fit and evaluate need a model that "
            "returns one tensor: call it without return_attention, or wrap it "
            "in a module whose forward returns output only"
        )


def schedule(warmup_steps, total_steps) -> None:
    non_negative_int("warmup_steps", warmup_steps)
    positive_int("total_steps", total_steps)
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(
            f"warmup_steps must be in [0, total_steps={total_steps}], got "
            f"{warmup_steps}; a few percent of total_steps is usual"
        )


# ------------------------------------------------------------- layers and tasks


def last_dim(module: nn.Module, x, width: int) -> None:
    """A float tensor (..., width) of the module's dtype, or a clear error."""
    who = type(module).__name__
    tensor("x", x, floating=True, min_ndim=1)
    if x.shape[-1] != width:
        raise ValueError(
            f"{who}(d_model={width}) got input with last dimension "
            f"{x.shape[-1]} (shape "
            f"{tuple(x.shape)}); the last dimension must be d_model={width}"
        )
    module_dtype("x", x, module)


# ------------------------------------------------------------- the decoder side


def seq2seq_generation(
    model, start_id, num_steps, end_id, beam_size, length_penalty
) -> None:
    """The arguments of ``greedy_decode``, ``beam_search`` and
    ``EncoderDecoderTransformer.generate``: ids of the target vocabulary."""
    vocab = model.target_vocab
    for name, value in (("start_id", start_id), ("end_id", end_id)):
        if value is None and name == "end_id":
            continue
        non_negative_int(name, value)
        if value >= vocab:
            raise ValueError(
                f"{name}={value} is not a token of the target vocabulary "
                f"(0 .. {vocab - 1})"
            )
    positive_int("num_steps", num_steps)
    max_len = model.positional.max_len
    # the last step reads the start token and num_steps - 1 written ones
    if num_steps > max_len:
        raise ValueError(
            f"num_steps={num_steps} makes the decoder read {num_steps} tokens "
            "at its last step, "
            f"more than the model's max_len={max_len}; ask for at most "
            f"{max_len} steps, or "
            "build the model with a larger max_len"
        )
    positive_int("beam_size", beam_size)
    non_negative_number(
        "length_penalty", length_penalty, "use 0.0 to rank by total log-prob"
    )
    if end_id is not None and (model.pad_id is None or end_id == model.pad_id):
        raise ValueError(
            f"end_id={end_id} needs a padding token, different from it, to "
            "fill the positions after it; the model has "
            f"pad_id={model.pad_id}: build it with pad_id=..., "
            "or pass end_id=None"
        )


# ----------------------------------------------------------- decoder-only model


def cache_window(cache, window: int | None, layer: str) -> None:
    """A rolling cache keeps no fewer positions than its layer reads
    (``window``; None: all)."""
    if cache.window is not None and (window is None or cache.window < window):
        reads = (
            "every earlier key (no window)"
            if window is None
            else f"the last {window} keys"
        )
        raise ValueError(
            f"a KVCache(window={cache.window}) keeps only the last "
            f"{cache.window} positions, but this {layer} reads {reads}: the "
            "keys it drops would silently be missing; make the caches with "
            "model.new_caches(batch_size), which match each layer"
        )


def one_of(name: str, value, choices, hint: str = "") -> None:
    """A ValueError that names ``choices`` (and ``hint``) unless ``value`` is
    one of them."""
    if value not in choices:
        choices = tuple(choices)
        raise ValueError(
            f"{name} must be one of {choices}, got {value!r}"
            + (f": {hint}" if hint else "")
        )


def instance(name: str, value, cls: type) -> None:
    """A TypeError naming ``cls`` unless ``value`` is one (a configuration, a
    dataset)."""
    if not isinstance(value, cls):
        raise TypeError(
            f"{name} must be a {cls.__name__}, got {type(value).__name__}; "
            f"build one with {cls.__name__}(...)"
        )


def function(name: str, value) -> None:
    """A TypeError unless ``value`` can be called: pass the function, not its
    result."""
    if not callable(value):
        raise TypeError(
            f"{name} must be callable, got {type(value).__name__}; pass the "
            "function itself, "
            "not the result of calling it"
        )


def activation(kind, choices: tuple) -> None:
    """A feed-forward activation's name: one of ``choices``."""
    hint = "'relu' is the 2017 Transformer's (and the book's default), 'gelu' BERT's, "
    hint += "'gelu_tanh' GPT-2's"
    one_of("activation", kind, choices, hint)


# ---------------------------------------------------------- images (chapter 14)


def patch_grid(image_size, patch_size) -> None:
    """Image and patch sizes (ints >= 1) where the patch size divides the
    image."""
    positive_int("image_size", image_size)
    positive_int("patch_size", patch_size)
    if image_size % patch_size:
        divisors = [p for p in range(1, image_size + 1) if image_size % p == 0]
        raise ValueError(
            f"image size {image_size} is not divisible by "
            f"patch_size={patch_size}: the patches "
            f"must tile the image exactly; pick patch_size among {divisors} "
            "(or pad the images)"
        )


def images(x, channels: int | None, image_size: int | None, who: str) -> None:
    """A float batch of images ``(B, C, H, W)``; ``C == channels`` and ``H == W
    == image_size`` unless those are None."""
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{who} expects a torch.Tensor of shape (B, C, H, W), "
            f"got {describe(x)}"
        )
    if not x.is_floating_point():
        raise TypeError(
            f"{who} expects floating-point images, got dtype {x.dtype}; "
            "convert them with "
            "images.float() (and normalize the pixel values)"
        )
    if x.ndim == 3 and (channels is None or x.shape[0] == channels):
        raise ValueError(
            f"{who} expects a batch of shape (B, C, H, W), got one image of "
            f"shape {tuple(x.shape)} without a batch dimension; add it with "
            "images.unsqueeze(0)"
        )
    if x.ndim != 4:
        raise ValueError(
            f"{who} expects a batch of shape (B, C={channels or 'C'}, H, W), "
            f"got shape {tuple(x.shape)}; a batch of grey images (B, H, W) "
            "needs images.unsqueeze(1)"
        )
    if channels is not None and x.shape[1] != channels:
        built = f"{who} was built for {channels} channel(s) but the images have {x.shape[1]}"
        if x.shape[-1] == channels:  # (B, H, W, C): channels last
            raise ValueError(
                f"{built} in dimension 1: shape {tuple(x.shape)} looks "
                f"channels-last (B, H, W, C={channels}); the model reads (B, "
                "C, H, W): convert them with images.permute(0, 3, 1, 2)"
            )
        raise ValueError(
            f"{built} (shape {tuple(x.shape)}, channels second); build it with "
            f"channels={x.shape[1]} or convert the images to "
            f"{channels} channel(s)"
        )
    height, width = x.shape[-2:]
    if image_size is not None and height != width:
        raise ValueError(
            f"{who} reads square {image_size} x {image_size} images, got "
            f"{height} x {width}; crop or pad them to a square, then resize "
            f"them to {image_size} x {image_size}"
        )
    if image_size is not None and height != image_size:
        raise ValueError(
            f"{who} was built for {image_size} x {image_size} images, got "
            f"{height} x {width}; "
            f"resize them or build it with image_size={height}"
        )
