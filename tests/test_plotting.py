"""Tests of helpers.plotting: the book's style, tensors to NumPy, and the heatmap."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display; before pyplot is imported

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from helpers.plotting import heatmap, to_numpy, use_book_style


@pytest.fixture(autouse=True)
def _close_figures_and_restore_style():
    with (
        mpl.rc_context()
    ):  # use_book_style changes rcParams for the whole process
        yield
    plt.close("all")


def test_use_book_style_sets_the_books_look():
    use_book_style()
    assert tuple(mpl.rcParams["figure.figsize"]) == (6.2, 3.4)
    assert mpl.rcParams["axes.grid"] is True
    assert (
        mpl.rcParams["axes.spines.top"] is False
        and mpl.rcParams["axes.spines.right"] is False
    )
    assert mpl.rcParams["image.cmap"] == "viridis"
    assert mpl.rcParams["savefig.bbox"] == "tight"
    use_book_style()  # idempotent: a notebook may call it twice
    assert tuple(mpl.rcParams["figure.figsize"]) == (6.2, 3.4)


def test_to_numpy_detaches_tensors_and_passes_arrays_through():
    weights = (
        torch.ones(2, 3, requires_grad=True) * 2
    )  # part of a graph: .numpy() would raise
    array = to_numpy(weights)
    assert isinstance(array, np.ndarray) and array.shape == (2, 3)
    assert (array == 2).all()
    assert isinstance(to_numpy([[1, 2], [3, 4]]), np.ndarray)
    original = np.arange(4.0)
    assert to_numpy(original) is original


def test_heatmap_draws_a_labelled_matrix_with_a_colorbar():
    matrix = torch.rand(4, 6, generator=torch.Generator().manual_seed(0))
    ax = heatmap(matrix, title="weights")
    image = ax.get_images()[0]
    np.testing.assert_array_equal(image.get_array(), matrix.numpy())
    assert (
        ax.get_xlabel() == "key position"
        and ax.get_ylabel() == "query position"
    )
    assert ax.get_title() == "weights"
    assert len(ax.figure.axes) == 2  # the heatmap and its colorbar
    assert all(spine.get_visible() for spine in ax.spines.values())
    ticks = ax.get_xticks()
    assert np.allclose(ticks, np.round(ticks))  # positions: integer ticks only


def test_heatmap_draws_into_a_given_axes_without_a_colorbar():
    figure, (left, right) = plt.subplots(1, 2)
    returned = heatmap(
        torch.eye(3), ax=right, xlabel="j", ylabel="i", colorbar=False, vmin=0
    )
    assert returned is right
    assert right.get_xlabel() == "j" and right.get_ylabel() == "i"
    assert not left.get_images() and len(figure.axes) == 2
    assert right.get_images()[0].get_clim() == (0.0, 1.0)


def test_heatmap_accepts_tensors_that_require_grad_and_boolean_masks():
    """What the figure shows: one image of the matrix's values (detached), each cell centred
    on its integer position, with the colour scale spanning the values."""
    ax = heatmap(torch.ones(3, 4, requires_grad=True) * 0.5)
    (image,) = ax.get_images()
    np.testing.assert_array_equal(image.get_array(), np.full((3, 4), 0.5))
    assert image.get_extent() == [
        -0.5,
        3.5,
        2.5,
        -0.5,
    ]  # 4 key columns, 3 query rows, row 0 on top
    assert not ax.get_lines() and ax.get_xlabel() == "key position"

    mask = torch.ones(3, 3, dtype=torch.bool).tril()
    ax = heatmap(mask.float())
    (image,) = ax.get_images()
    np.testing.assert_array_equal(image.get_array(), np.tril(np.ones((3, 3))))
    assert image.get_clim() == (
        0.0,
        1.0,
    )  # masked cells at the bottom of the scale, allowed at the top
    assert ax.get_xlim() == (-0.5, 2.5) and ax.get_ylim() == (2.5, -0.5)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 3), (1, 2, 4, 4)])
def test_heatmap_refuses_anything_but_a_matrix(shape):
    with pytest.raises(
        ValueError, match=r"heatmap needs a 2-D matrix.*weights\[0, 0\]"
    ):
        heatmap(torch.zeros(shape))
    assert not plt.get_fignums()  # refused before a figure was made
