"""Export the Shakespeare chapter's shipped GPT to ONNX for the panel that plays it in a browser.

    python scripts/export_shakespeare_onnx.py

Loads ``helpers.tasks.shakespeare.pretrained()`` (the weights in
``helpers/tasks/shakespeare_gpt.safetensors``), exports it with
``torch.onnx.export(..., dynamo=True)`` and writes two files into ``book/_static/play/``,
which the website serves as they are:

- ``shakespeare_gpt.onnx``: token ids ``tokens (1, T)``, int64, ``T`` from 1 to the context
  length (64), to ``logits (1, V)``: the next character's logits after the last position only
  (a sampling step needs nothing else, and the browser then computes no other row of the head);
- ``shakespeare_gpt.json``: what the page's script needs (the characters in token order, the
  context length, the file names) and what ties the ONNX file to the weights (the SHA-256 of
  both files, the versions of the exporter). ``tests/test_play.py`` checks that the committed
  ONNX file is the export of the committed weights and agrees with PyTorch.

Before writing, it runs the export with onnxruntime (Python) against PyTorch on prompts of
every length from 1 to 64 and on greedy decoding past the context; it fails loudly on a
difference. Needs the full environment (``onnx``, ``onnxscript``, ``onnxruntime`` are in
requirements.txt, not in the package's dependencies). Run it after the weights change.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys

import numpy as np
import torch
from torch import nn

from helpers.tasks.shakespeare import WEIGHTS_FILE, LastLogits, pretrained

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "book" / "_static" / "play"
WEIGHTS = ROOT / "helpers" / "tasks" / WEIGHTS_FILE
ONNX_NAME = "shakespeare_gpt.onnx"
META_NAME = "shakespeare_gpt.json"
PROMPT = "HAMLET.\nTo be, or not to be"  # the chapter's prompt, for the checks
# The largest |logit difference| accepted (float32, logits of order 10).
TOLERANCE = 1e-4


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def export(model: nn.Module, path: pathlib.Path) -> None:
    """Write the ONNX file of ``LastLogits(model)`` to ``path`` (one file, weights inside)."""
    context = model.context_length
    wrapper = LastLogits(model).eval()
    length = torch.export.Dim("T", min=1, max=context)
    example = torch.zeros(1, context, dtype=torch.long)
    program = torch.onnx.export(
        wrapper,
        (example,),
        dynamo=True,
        input_names=["tokens"],
        output_names=["logits"],
        dynamic_shapes={"tokens": {1: length}},
        external_data=False,
        optimize=True,
        verbose=False,
    )
    program.save(str(path), external_data=False)


def onnx_session(path: pathlib.Path):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(
        str(path), options, providers=["CPUExecutionProvider"]
    )


def onnx_logits(session, ids: list[int]) -> np.ndarray:
    """The ONNX model's ``(V,)`` logits after ``ids``."""
    tokens = np.asarray(ids, dtype=np.int64)[None]
    return session.run(["logits"], {"tokens": tokens})[0][0]


@torch.no_grad()
def torch_logits(model, ids: list[int]) -> np.ndarray:
    return model(torch.tensor([ids]))[0, -1].numpy()


def greedy(
    next_logits, prompt: list[int], length: int, context: int
) -> list[int]:
    """``length`` tokens after ``prompt``, each the arg-max after the last ``context`` tokens
    (the crop of ``GPT.generate``); ``next_logits(ids)`` gives the logits after ``ids``."""
    ids = list(prompt)
    for _ in range(length):
        ids.append(int(np.argmax(next_logits(ids[-context:]))))
    return ids[len(prompt) :]


def compare(model, tokenizer, session) -> dict:
    """The largest logit difference over windows of every length, and greedy decoding in both."""
    context = model.context_length
    text = tokenizer.encode(
        "KING. Now is the winter of our discontent, and all the clouds that lour'd upon our house"
    ).tolist()
    worst = max(
        float(
            np.abs(
                onnx_logits(session, text[:n]) - torch_logits(model, text[:n])
            ).max()
        )
        for n in range(1, context + 1)
    )
    prompt = tokenizer.encode(PROMPT).tolist()
    length = 120  # past the context: the crop is exercised
    from_torch = model.generate(torch.tensor([prompt]), length, greedy=True)[
        0, len(prompt) :
    ].tolist()
    from_onnx = greedy(
        lambda ids: onnx_logits(session, ids), prompt, length, context
    )
    return {
        "max_abs_logit_difference": worst,
        "greedy_equal": from_torch == from_onnx,
        "greedy_text": tokenizer.decode(from_torch),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model, tokenizer = pretrained()
    args.out.mkdir(parents=True, exist_ok=True)
    onnx_path = args.out / ONNX_NAME
    export(model, onnx_path)
    result = compare(model, tokenizer, onnx_session(onnx_path))
    worst = result["max_abs_logit_difference"]
    print(
        f"largest |logit difference| onnxruntime vs PyTorch: {worst:.2e}"
        f"; greedy decoding equal: {result['greedy_equal']}"
    )
    print(f"greedy continuation of {PROMPT!r}: {result['greedy_text']!r}")
    if (
        result["max_abs_logit_difference"] > TOLERANCE
        or not result["greedy_equal"]
    ):
        onnx_path.unlink()
        sys.exit("the export disagrees with PyTorch: nothing written")
    import onnx
    import onnxruntime
    import onnxscript

    meta = {
        "model": ONNX_NAME,
        "input": "tokens",
        "output": "logits",
        "context_length": model.context_length,
        "vocabulary": tokenizer.chars,
        "onnx_bytes": onnx_path.stat().st_size,
        "onnx_sha256": sha256(onnx_path),
        "weights": f"helpers/tasks/{WEIGHTS_FILE}",
        "weights_sha256": sha256(WEIGHTS),
        "exported_with": {
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxscript": onnxscript.__version__,
            "checked_with_onnxruntime": onnxruntime.__version__,
        },
        "command": "python scripts/export_shakespeare_onnx.py",
    }
    (args.out / META_NAME).write_text(
        json.dumps(meta, indent=1, ensure_ascii=False) + "\n"
    )
    print(
        f"wrote {onnx_path} ({meta['onnx_bytes'] / 1e6:.2f} MB) and {args.out / META_NAME}"
    )


if __name__ == "__main__":
    main()
