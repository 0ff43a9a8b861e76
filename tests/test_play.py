"""The model that the Shakespeare chapter's page plays in the browser (book/_static/play/).

The committed ONNX file must be the export of the committed weights (the SHA-256 that
scripts/export_shakespeare_onnx.py recorded, and the logits themselves), and onnxruntime on it
must agree with PyTorch: logits after prompts of every length up to the context, and greedy
decoding past the context. The page's own run in Chromium is in tests/test_browser.py.
After new weights: ``python scripts/export_shakespeare_onnx.py``.
"""

import hashlib
import json

import numpy as np
import pytest
import torch
from conftest import ROOT, load_script

from helpers.tasks.shakespeare import WEIGHTS_FILE, pretrained

onnxruntime = pytest.importorskip(
    "onnxruntime",
    reason="onnxruntime is in requirements.txt (the full environment)",
)
EXPORT = load_script("export_shakespeare_onnx.py")
PLAY = ROOT / "book" / "_static" / "play"
REGENERATE = "run `python scripts/export_shakespeare_onnx.py` and commit book/_static/play/"


@pytest.fixture(scope="module")
def meta():
    return json.loads((PLAY / EXPORT.META_NAME).read_text())


@pytest.fixture(scope="module")
def shipped():
    return pretrained()


@pytest.fixture(scope="module")
def session():
    return EXPORT.onnx_session(PLAY / EXPORT.ONNX_NAME)


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_onnx_file_is_the_export_of_the_committed_weights(meta):
    weights = ROOT / "helpers" / "tasks" / WEIGHTS_FILE
    assert meta["weights_sha256"] == sha256(weights), (
        f"the weights changed since the ONNX file was exported: {REGENERATE}"
    )
    onnx_file = PLAY / meta["model"]
    assert meta["onnx_sha256"] == sha256(onnx_file), (
        f"the ONNX file is not the one the export recorded: {REGENERATE}"
    )
    assert meta["onnx_bytes"] == onnx_file.stat().st_size


def test_the_page_gets_the_vocabulary_and_context_of_the_model(meta, shipped):
    model, tokenizer = shipped
    assert meta["vocabulary"] == tokenizer.chars
    assert meta["context_length"] == model.context_length == 64
    assert (meta["input"], meta["output"]) == ("tokens", "logits")


def test_onnxruntime_gives_pytorchs_logits(shipped, session):
    model, tokenizer = shipped
    ids = tokenizer.encode(
        "MACBETH.\nTomorrow, and tomorrow, and tomorrow, creeps in this petty pace from day"
    ).tolist()
    assert len(ids) > model.context_length
    for n in [1, 2, 7, 33, 63, 64]:
        got = EXPORT.onnx_logits(session, ids[:n])
        want = EXPORT.torch_logits(model, ids[:n])
        assert got.shape == (tokenizer.vocab_size,)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


def test_greedy_decoding_is_pytorchs(shipped, session):
    """A fixed prompt, 100 characters at temperature 0: past the context, so the crop to the
    last 64 characters (as GPT.generate) is exercised."""
    model, tokenizer = shipped
    prompt = tokenizer.encode(EXPORT.PROMPT).tolist()
    want = model.generate(torch.tensor([prompt]), 100, greedy=True)[
        0, len(prompt) :
    ]
    got = EXPORT.greedy(
        lambda ids: EXPORT.onnx_logits(session, ids),
        prompt,
        100,
        model.context_length,
    )
    assert tokenizer.decode(got) == tokenizer.decode(want)


def test_the_onnx_model_takes_one_to_context_length_tokens(session, meta):
    (tokens,) = session.get_inputs()
    assert tokens.name == "tokens" and tokens.type == "tensor(int64)"
    # batch 1, a dynamic length
    assert tokens.shape[0] == 1 and isinstance(tokens.shape[1], str)
    (logits,) = session.get_outputs()
    assert logits.name == "logits" and logits.shape == [
        1,
        len(meta["vocabulary"]),
    ]
