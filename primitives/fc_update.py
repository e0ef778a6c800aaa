"""Fully connected layers, weight update, as a tiled product (primitives/fc_nest.py;
primitives/fc.py has the layouts, the geometry and the plans that record it)."""
from brgemm.layouts import Layout, matrix_tiles
from primitives.fc_nest import Product, extents, product_nest


def update(g, plain=False, c_tiles=False):
    """The minibatch is the reduction. Blocked: dw tiles (bc x bk, w's
    layout) dw[k][c] = sum_n xt[c][n] @ dy[n][k]. Plain (the functional form):
    dW (K x C) = sum_n dyt[k][n] @ x[n][c] from the tiles of dy^T and x, both
    zero-padded, so only dW's edges are ragged; c_tiles: dW in tiles
    [Kb][Cb][bk][bc] all the same."""
    if plain:
        return Product(
            "k", "c", "n",
            a=("dyt", Layout(k=g.Kb, n=g.Nb, bk=g.bk, bn=g.bn)),
            b=("x", Layout(n=g.Nb, c=g.Cb, bn=g.bn, bc=g.bc)),
            c=("dw", matrix_tiles(g.K, g.C, g.bk, g.bc, ("k", "c"), plain=not c_tiles)),
            sizes=extents(g, plain, padded="n"), epilogue=("k", "c"))
    return Product(
        "c", "k", "n",
        a=("xt", Layout(c=g.Cb, n=g.Nb, bc=g.bc, bn=g.bn)),
        b=("dy", Layout(n=g.Nb, k=g.Kb, bn=g.bn, bk=g.bk)),
        c=("dw", Layout(k=g.Kb, c=g.Cb, bc=g.bc, bk=g.bk).transpose("c", "k", "bc", "bk")),
        sizes=extents(g, plain), epilogue=("k", "c"))


def update_nest(ex, loops, g, dtype, epilogue, vnni=False, plain=False):
    """The weight update's calls; epilogue(k, c) runs on the last n chunk."""
    product_nest(ex, loops, update(g, plain), dtype, epilogue, g.chunk["upd"], vnni)


def update_plain_nest(ex, loops, g, dtype, epilogue, vnni=False):
    """update_nest on plain dW (K x C) from dy^T and x tiles."""
    update_nest(ex, loops, g, dtype, epilogue, vnni, plain=True)
