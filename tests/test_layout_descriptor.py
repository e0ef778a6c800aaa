"""brgemm.layouts.Layout, the descriptor the loop nests compute offsets with,
against NumPy: C-contiguous offsets (np.ravel_multi_index), transposed views
(an array's own strides), matrix_tiles on plain and blocked matrices (where
to_blocks puts each element), and its errors. Random shapes; the seed prints."""
import numpy as np
import pytest

from brgemm.layouts import Layout, matrix_tiles, to_blocks

NAMES = "abcdefghi"


def random_layout(rng, rank):
    shape = tuple(int(n) for n in rng.integers(1, 7, rank))
    return shape, Layout(**dict(zip(NAMES, shape)))


@pytest.mark.parametrize("rank", range(1, 10))
def test_offsets_are_numpys(rng, rank):
    for _ in range(20):
        shape, lay = random_layout(rng, rank)
        assert lay.shape == shape and lay.names == tuple(NAMES[:rank])
        index = tuple(int(rng.integers(0, n)) for n in shape)
        assert lay.at(*index) == np.ravel_multi_index(index, shape)
        given = int(rng.integers(1, rank + 1))  # the indices left out are 0
        assert lay.at(*index[:given]) == np.ravel_multi_index(index[:given] + (0,) * (rank - given),
                                                              shape)
        ref = np.zeros(shape, np.int8)
        for i, name in enumerate(lay.names):
            assert lay.ld(name) == ref.strides[i]


@pytest.mark.parametrize("rank", range(2, 8))
def test_transpose_matches_a_transposed_array(rng, rank):
    shape, lay = random_layout(rng, rank)
    values = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    order = [int(i) for i in rng.permutation(rank)]
    view, t = values.transpose(order), lay.transpose(*(lay.names[i] for i in order))
    assert t.shape == view.shape
    for _ in range(30):
        index = tuple(int(rng.integers(0, n)) for n in view.shape)
        assert t.at(*index) == view[index]  # the value is the element's offset
    for i, name in enumerate(t.names):
        assert t.ld(name) == view.strides[i] // values.itemsize


@pytest.mark.parametrize("plain", [False, True])
def test_matrix_tiles_find_every_element(rng, plain):
    for _ in range(5):
        R, S = (int(v) for v in rng.integers(1, 80, 2))
        br, bs = (int(v) for v in rng.integers(1, 33, 2))
        M = rng.permutation(R * S).reshape(R, S).astype(np.float32)  # exact in f32
        store = M.ravel() if plain else to_blocks(M, br, bs).ravel()
        tiles = matrix_tiles(R, S, br, bs, ("r", "s"), plain)
        assert tiles.names == ("r", "s", "br", "bs")
        assert tiles.ld("br") == (S if plain else bs)
        rows, cols = rng.integers(0, R, 40), rng.integers(0, S, 40)
        for r, s in zip(rows.tolist(), cols.tolist()):
            assert store[tiles.at(r // br, s // bs, r % br, s % bs)] == M[r, s]


def test_explicit_strides():
    lay = Layout((1, 10), a=3, b=4)  # column-major 3 x 4 with 10 rows of room
    assert lay.at(2, 3) == 32 and lay.ld("a") == 1 and lay.ld("b") == 10


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="^dims: "):
        Layout()
    for bad in (0, -1, 2.0, True, "3"):
        with pytest.raises(ValueError, match="^b: "):
            Layout(a=2, b=bad)
    for bad in ((1,), (1, -2), (1, 2.0), (True, 1)):
        with pytest.raises(ValueError, match="^strides: "):
            Layout(bad, a=2, b=3)
    lay = Layout(a=2, b=3)
    with pytest.raises(ValueError, match="^name: no dimension 'c'"):
        lay.ld("c")
    for names in (("a",), ("a", "a"), ("a", "c"), ("b", "a", "c")):
        with pytest.raises(ValueError, match="^names: "):
            lay.transpose(*names)
    with pytest.raises(TypeError):
        lay.at(0, 1, 2)
    with pytest.raises(TypeError):
        Layout(**dict(zip(NAMES, [2] * 9))).at(*[0] * 10)
