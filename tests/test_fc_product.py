"""FC's one product nest (primitives/fc_nest.py), checked call by call against
the matrices it stands for: every offset unravelled with NumPy into a
matrix element (np.unravel_index on the tile layouts of primitives/fc.py's
docstring, or a row-major index on plain matrices), then A's rows must be C's,
A's columns B's rows, B's columns C's; each C tile gets every reduction block
once, beta 0 first, and its epilogue once, on the call with the last block.
Random shapes, blocks and chunks; the seed prints."""
import numpy as np
import pytest

from brgemm.layouts import Layout
from primitives import fc, fc_plans
from primitives.fc_nest import Product


class Calls:
    """An executor that keeps the calls a nest makes."""

    def __init__(self):
        self.calls = []

    def at(self, phase, task):
        pass

    def gemm(self, blk, a, a_offs, b, b_offs, c, c_off, ops=()):
        self.calls.append((blk, a, list(a_offs), b, list(b_offs), c, c_off, ops))


def tiles(grid, block, transposed=False):
    """Offset -> (row, col) of a tile's first element in the matrix that tiles
    [grid[0]][grid[1]][block[0]][block[1]] hold (transposed: the grid's two
    dimensions swapped, as w's [Kb][Cb] holds the C x K matrix W^T)."""
    def where(off):
        g0, g1, u, v = np.unravel_index(off, tuple(grid) + tuple(block))
        if transposed:
            g0, g1 = g1, g0
        return g0 * block[0] + u, g1 * block[1] + v
    return where


def plain(cols):
    return lambda off: divmod(off, cols)


def matrices(g, pass_, is_plain):
    """Tensor name -> offset -> (row, col) in the pass's A, B, C matrices, and
    the (I, J, R) sizes the product covers (padded where blocked)."""
    Nb, Cb, Kb, bn, bc, bk = g.Nb, g.Cb, g.Kb, g.bn, g.bc, g.bk
    if pass_ == "fwd":   # y (N x K) = x (N x C) @ W^T (C x K)
        a = plain(g.C) if is_plain else tiles((Nb, Cb), (bn, bc))
        c = plain(g.K) if is_plain else tiles((Nb, Kb), (bn, bk))
        return {"x": a, "w": tiles((Kb, Cb), (bc, bk), True), "y": c}, ("N", "K", "C")
    if pass_ == "bwd":   # dx (N x C) = dy (N x K) @ W (K x C)
        a = plain(g.K) if is_plain else tiles((Nb, Kb), (bn, bk))
        c = plain(g.C) if is_plain else tiles((Nb, Cb), (bn, bc))
        return {"dy": a, "wt": tiles((Cb, Kb), (bk, bc), True), "dx": c}, ("N", "C", "K")
    if is_plain:         # dW (K x C) = dy^T (K x N) @ x (N x C)
        return {"dyt": tiles((Kb, Nb), (bk, bn)), "x": tiles((Nb, Cb), (bn, bc)),
                "dw": plain(g.C)}, ("K", "C", "N")
    # dW^T (C x K) = x^T (C x N) @ dy (N x K), tiles at dw[k][c]
    return {"xt": tiles((Cb, Nb), (bc, bn)), "dy": tiles((Nb, Kb), (bn, bk)),
            "dw": tiles((Kb, Cb), (bc, bk), True)}, ("C", "K", "N")


@pytest.mark.parametrize("pass_", ["fwd", "bwd", "upd"])
@pytest.mark.parametrize("is_plain", [False, True])
def test_every_call_is_its_formula(rng, pass_, is_plain):
    for _ in range(4):
        N, C, K = (int(v) for v in rng.integers(1, 90, 3))
        blocks = tuple(int(rng.choice(v)) for v in ((4, 8, 16, 32), (16, 32), (16, 32)))
        chunk = int(rng.choice([1, 2, 3, 1024]))
        g = fc.geometry(N, C, K, blocks=blocks,
                        config={p: {"chunk": chunk} for p in ("fwd", "bwd", "upd")})
        ex = Calls()
        nest = {"fwd": fc.forward_nest, "bwd": fc.backward_nest, "upd": fc.update_nest}[pass_]
        nest(ex, fc_plans._loops(g, pass_), g, "f32", lambda *at: ("epilogue",) + at,
             plain=is_plain)
        where, (I, J, R) = matrices(g, pass_, is_plain)
        size = {"N": g.N, "C": g.C, "K": g.K}
        padded = {"N": g.Nb * g.bn, "C": g.Cb * g.bc, "K": g.Kb * g.bk}
        block = {"N": g.bn, "C": g.bc, "K": g.bk}
        extent = {d: size[d] if is_plain and (pass_, d) != ("upd", "N") else padded[d]
                  for d in "NCK"}
        seen, epilogues = {}, {}
        for blk, a, a_offs, b, b_offs, c, c_off, ops in ex.calls:
            i0, j0 = where[c](c_off)
            assert (i0 % block[I], j0 % block[J]) == (0, 0)
            assert (blk.m, blk.n) == (min(block[I], extent[I] - i0), min(block[J], extent[J] - j0))
            for ao, bo in zip(a_offs, b_offs):
                (ai, ar), (br, bj) = where[a](ao), where[b](bo)
                assert (ai, bj) == (i0, j0) and ar == br and ar % block[R] == 0
                assert blk.k == min(block[R], extent[R] - ar)
                assert (ar not in seen.setdefault((i0, j0), [])), "a reduction block twice"
                seen[(i0, j0)].append(ar)
            assert blk.beta == (0.0 if min(where[a](o)[1] for o in a_offs) == 0 else 1.0)
            if ops:
                assert max(where[a](o)[1] for o in a_offs) // block[R] == padded[R] // block[R] - 1
                epilogues[(i0, j0)] = epilogues.get((i0, j0), 0) + 1
        grid = [(i, j) for i in range(0, padded[I], block[I]) for j in range(0, padded[J], block[J])]
        assert sorted(seen) == grid
        assert all(sorted(v) == list(range(0, padded[R], block[R])) for v in seen.values())
        assert epilogues == dict.fromkeys(grid, 1)


def test_a_product_refuses_operands_walked_out_of_order():
    tile = Layout(n=2, c=3, bn=4, bc=4)
    with pytest.raises(ValueError, match=r"^x: its tile grid is \('c', 'n'\)"):
        Product("n", "k", "c", a=("x", tile.transpose("c", "n", "bn", "bc")),
                b=("w", Layout(c=3, k=2, bc=4, bk=4)), c=("y", Layout(n=2, k=2, bn=4, bk=4)),
                sizes={}, epilogue=("n", "k"))
