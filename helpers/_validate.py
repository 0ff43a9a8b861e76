"""Every argument and tensor check of the package, in one place.

A value is checked once, where it enters the package (a constructor, a public function, the
first line of a ``forward``), so the classes a chapter shows contain the computation and one
line of checks. One rule for the exception type:

* ``TypeError``: the value is of the wrong kind (a float where an int is needed, a string
  where a number is, a class where an instance is, an int64 tensor where a float one is);
* ``ValueError``: the kind is right, the value is not (a negative width, a wrong shape, a mask
  in the opposite convention).

Every message says what was wrong and how to fix it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping

import torch
from torch import Tensor, nn

# --------------------------------------------------------------------------- numbers


def _kind(value) -> str:
    return f"{type(value).__name__} ({value!r})"


def positive_int(name: str, value) -> int:
    """``value`` as an int >= 1: TypeError unless it is an int (not a bool), ValueError if < 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {_kind(value)}; pass e.g. {name}=8")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value}; pass a value >= 1")
    return int(value)


def non_negative_int(name: str, value) -> int:
    """``value`` as an int >= 0 (TypeError / ValueError as :func:`positive_int`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a non-negative int, got {_kind(value)}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def real(name: str, value) -> float:
    """``value`` as a finite float: TypeError for strings, bools and other non-numbers."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a number, got {_kind(value)}; pass an int or a float, "
            f"not a {type(value).__name__}"
        )
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def positive_number(name: str, value, hint: str = "") -> float:
    """``value`` as a finite float > 0 (TypeError for non-numbers, ValueError otherwise)."""
    value = real(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}" + (f"; {hint}" if hint else ""))
    return value


def non_negative_number(name: str, value, hint: str = "") -> float:
    """``value`` as a finite float >= 0."""
    value = real(name, value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}" + (f"; {hint}" if hint else ""))
    return value


def probability(name: str, value, hint: str = "use 0.0 to switch it off") -> float:
    """``value`` as a float in [0, 1): TypeError for non-numbers, ValueError outside."""
    value = real(name, value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}; {hint}")
    return value


def boolean(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {_kind(value)}")
    return value


def head_width(d_model, num_heads) -> int:
    """Check a multi-head layer's sizes; return ``d_head = d_model // num_heads``."""
    d_model = positive_int("d_model", d_model)
    num_heads = positive_int("num_heads", num_heads)
    if d_model % num_heads:
        divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}; each head gets "
            f"d_model / num_heads features, so pick num_heads among {divisors}"
        )
    return d_model // num_heads


def even_width(d_model) -> None:
    """A width for sine/cosine pairs."""
    positive_int("d_model", d_model)
    if d_model % 2:
        nearest = f"{d_model + 1}" if d_model == 1 else f"{d_model + 1} (or {d_model - 1})"
        raise ValueError(
            f"d_model must be even: sine/cosine encodings fill the width in (sin, cos) pairs, "
            f"got d_model={d_model}; use d_model={nearest} or project the input to an even "
            "width first"
        )


def encoding_base(base) -> None:
    base = real("base", base)
    if base <= 1.0:
        raise ValueError(
            f"base must be a finite number > 1 (the angular speeds are base ** (-2j / D)), "
            f"got base={base}; the original Transformer uses 10000.0"
        )


# --------------------------------------------------------------------------- tensors


def tensor(name: str, value, *, floating: bool = False, min_ndim: int = 0) -> Tensor:
    """``value`` if it is a tensor (of a float dtype if ``floating``) of >= ``min_ndim`` dims."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if floating and not value.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor, got dtype {value.dtype}; "
            f"convert it with {name}.float()"
        )
    if value.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions, got shape {tuple(value.shape)}"
        )
    return value


def same_dtype(**tensors: Tensor) -> None:
    dtypes = [t.dtype for t in tensors.values()]
    if len(set(dtypes)) > 1:
        first = next(iter(tensors))
        raise TypeError(
            f"{', '.join(tensors)} must share a dtype, got {', '.join(map(str, dtypes))}; "
            f"convert them with .to({first}.dtype)"
        )


def module_dtype(name: str, x: Tensor, module: nn.Module) -> None:
    """TypeError unless ``x`` has the dtype of ``module``'s parameters (float64 into float32)."""
    parameter = next(module.parameters(), None)
    if parameter is not None and x.dtype != parameter.dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but {type(module).__name__}'s parameters are "
            f"{parameter.dtype}; convert the input with {name}.to({parameter.dtype}) "
            f"or the module with .to({x.dtype})"
        )


def sequence(name: str, x, d_model: int, who: str, max_len: int | None = None) -> Tensor:
    """A float ``(B, T, D)`` batch of sequences with ``D == d_model`` (and ``T <= max_len``)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{who} expects a torch.Tensor of shape (B, T, D), got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(
            f"{who} expects a floating-point {name}, got dtype {x.dtype}; token ids go through "
            f"an nn.Embedding first, other numbers through {name}.float()"
        )
    if x.ndim != 3:
        raise ValueError(
            f"{who} expects {name} of shape (B, T, D={d_model}), got {tuple(x.shape)}; add a "
            f"batch dimension with {name}.unsqueeze(0) if you have a single sequence"
        )
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{who} was built for d_model={d_model} but {name} has width {x.shape[-1]} "
            f"(shape {tuple(x.shape)}); project it to {d_model} features first, or build the "
            f"module with d_model={x.shape[-1]}"
        )
    if max_len is not None and x.shape[1] > max_len:
        raise ValueError(
            f"sequence length T={x.shape[1]} exceeds max_len={max_len} of {who}; "
            f"build it with max_len >= {x.shape[1]} or cut the sequence"
        )
    return x


def attention_inputs(query, key, value, d_model: int, who: str) -> None:
    """A multi-head layer's query ``(B, Tq, D)``, key and value ``(B, Tk, D)``."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        sequence(name, x, d_model, who)
    same_dtype(query=query, key=key, value=value)
    if key.shape[1] != value.shape[1]:
        raise ValueError(
            f"key and value must have the same length Tk, got key {tuple(key.shape)} and "
            f"value {tuple(value.shape)}; each key needs exactly one value"
        )
    if not query.shape[0] == key.shape[0] == value.shape[0]:
        raise ValueError(
            f"query, key and value must have the same batch size, got {query.shape[0]}, "
            f"{key.shape[0]} and {value.shape[0]}"
        )


def vector(name: str, value) -> Tensor:
    """A 1-D tensor (one scalar per point)."""
    tensor(name, value)
    if value.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D (one scalar per point), got shape {tuple(value.shape)}; "
            "flatten it with .reshape(-1)"
        )
    return value


def pairs(keys, values) -> None:
    """Keys and values of kernel regression: 1-D tensors of the same length."""
    vector("keys", keys)
    vector("values", values)
    if keys.shape != values.shape:
        raise ValueError(
            f"keys and values must pair up one to one, got {tuple(keys.shape)} keys and "
            f"{tuple(values.shape)} values"
        )


def kernel_width(width) -> None:
    """A kernel width: a number or tensor, every entry > 0."""
    if not isinstance(width, Tensor):
        real("width", width)
    values = width.detach() if isinstance(width, Tensor) else torch.tensor(float(width))
    if not (values > 0).all():  # NaN fails this test too
        raise ValueError(
            f"width must be > 0, got {width}; a kernel of width 0 is a hard lookup, "
            "use nearest_neighbour for that"
        )


def generator(value) -> torch.Generator:
    if not isinstance(value, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator, got {type(value).__name__}; "
            "pass torch.Generator().manual_seed(0)"
        )
    return value


def tokens(value, vocab_size: int, max_len: int | None = None) -> Tensor:
    """Token ids: an int64 ``(B, T)`` tensor with values in ``0 .. vocab_size - 1``."""
    if not isinstance(value, Tensor) or value.dtype != torch.long:
        got = value.dtype if isinstance(value, Tensor) else type(value).__name__
        raise TypeError(
            f"tokens must be an int64 tensor of shape (B, T), got {got}; convert with tokens.long()"
        )
    if value.ndim != 2:
        raise ValueError(
            f"tokens must have shape (B, T), got {tuple(value.shape)}; "
            "add a batch dimension with tokens.unsqueeze(0)"
        )
    if value.numel() and not 0 <= int(value.min()) <= int(value.max()) < vocab_size:
        raise ValueError(
            f"tokens must lie in 0 .. {vocab_size - 1}, got values from "
            f"{int(value.min())} to {int(value.max())}"
        )
    if max_len is not None and value.shape[1] > max_len:
        raise ValueError(
            f"the sequence has T={value.shape[1]} tokens, more than the model's context of "
            f"{max_len}; cut it to the last {max_len} tokens"
        )
    return value


def logits_targets(logits, targets) -> None:
    """Per-token logits ``(B, T, C)`` and integer targets ``(B, T)``."""
    if not isinstance(logits, Tensor) or not isinstance(targets, Tensor):
        raise TypeError("logits and targets must be tensors of shapes (B, T, C) and (B, T)")
    if logits.ndim != 3 or logits.shape[:2] != targets.shape:
        raise ValueError(
            f"logits must be (B, T, C) and targets (B, T), got {tuple(logits.shape)} and "
            f"{tuple(targets.shape)}"
        )


# --------------------------------------------------------------------------- masks


def bool_mask(value) -> Tensor:
    """A boolean tensor; float masks are refused because 0/1 and 0/-inf masks look alike."""
    if not isinstance(value, Tensor):
        raise TypeError(f"mask must be a boolean torch.Tensor or None, got {type(value).__name__}")
    if value.dtype != torch.bool:
        raise TypeError(
            f"mask must be boolean (True = may attend), got dtype {value.dtype}. "
            "For a 0/1 indicator mask pass mask.bool(); for an additive mask of 0 and -inf "
            "pass (mask == 0)"
        )
    return value


def mask(value, scores_shape: torch.Size) -> Tensor:
    """A boolean mask (True = may attend) that broadcasts to ``scores_shape`` (..., Tq, Tk).

    Also refuses the one mask of the opposite convention that can be recognized for sure:
    PyTorch's causal mask ``torch.triu(ones, 1)`` (True = blocked) read as True = may attend
    blocks every query from itself and leaves the last query nothing at all.
    """
    value = bool_mask(value)
    try:
        shape = torch.broadcast_shapes(value.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != scores_shape:
        raise ValueError(
            f"mask of shape {tuple(value.shape)} cannot broadcast to the attention scores of "
            f"shape {tuple(scores_shape)} (..., Tq, Tk). Use a (Tq, Tk) mask, or add size-1 "
            "dimensions where it is shared: with per-head scores (B, H, Tq, Tk) a 3-D mask is "
            "read as (B, Tq, Tk); write a per-head mask shared by the batch as (1, H, Tq, Tk)"
        )
    size = value.shape[-1]
    if value.ndim >= 2 and size > 1 and value.shape[-2] == size:
        blocked_self = not value.diagonal(dim1=-2, dim2=-1).any()
        if blocked_self and not value.any(dim=-1).all():
            raise ValueError(
                "this mask blocks every query from its own key and leaves the last query no key "
                "at all: it looks like PyTorch's causal mask torch.triu(ones, 1), where True "
                "means 'blocked'. This package's masks mean True = may attend: pass ~mask, "
                "or build it with helpers.attention.causal_mask(T)"
            )
    return value


# --------------------------------------------------------------------------- training


def model(value) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module, got {type(value).__name__}; "
            "wrap plain functions in an nn.Module"
        )
    return value


def loader(name: str, value) -> Iterable:
    if isinstance(value, Tensor) or not isinstance(value, Iterable):
        raise TypeError(
            f"{name} must be an iterable of (inputs..., target) batches such as a "
            f"torch.utils.data.DataLoader, got {type(value).__name__}; "
            "wrap tensors with DataLoader(TensorDataset(x, y), batch_size=...)"
        )
    return value


def loss_function(value):
    if isinstance(value, type):
        raise TypeError(
            f"loss_fn must be a loss function or an instance of a loss class, got the class "
            f"{value.__name__} itself; call it: loss_fn={value.__name__}()"
        )
    if not callable(value):
        raise TypeError(f"loss_fn must be callable, e.g. nn.MSELoss(), got {type(value).__name__}")
    return value


def optimizer(value, for_model: nn.Module | None = None) -> torch.optim.Optimizer:
    """An optimizer; with ``for_model``, one that updates at least one of its parameters."""
    if not isinstance(value, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(value).__name__}; "
            "e.g. torch.optim.AdamW(model.parameters(), lr=1e-3)"
        )
    if for_model is not None:
        mine = {id(p) for p in for_model.parameters()}
        theirs = {id(p) for group in value.param_groups for p in group["params"]}
        if mine and not mine & theirs:
            raise ValueError(
                "the optimizer holds none of this model's parameters (was it built for another "
                "model, or before the model was rebuilt?), so training would change nothing; "
                "build it with torch.optim.AdamW(model.parameters(), ...)"
            )
    return value


def metrics(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(
            f"metrics must be a dict {{name: fn(output, target)}}, got {type(value).__name__}"
        )
    for name, metric in value.items():
        if not isinstance(name, str) or not name.isidentifier() or name == "loss":
            raise ValueError(
                f"metric names must be identifiers other than 'loss', got {name!r}; "
                "rename it, e.g. 'accuracy'"
            )
        if not callable(metric):
            raise TypeError(f"metric {name!r} must be callable, got {type(metric).__name__}")
    return dict(value)


def model_output(output) -> Tensor:
    """A model's output as ``fit`` and ``evaluate`` need it: one tensor."""
    if isinstance(output, tuple):
        raise TypeError(
            f"the model returned a tuple of {len(output)} items (e.g. output and attention "
            "weights); fit and evaluate need a model that returns one tensor: call it without "
            "return_attention, or wrap it in a module whose forward returns output only"
        )
    return output
