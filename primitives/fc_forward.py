"""Fully connected layers, forward, as a tiled product (primitives/fc_nest.py;
primitives/fc.py has the layouts, the geometry and the plans that record it)."""
from brgemm.layouts import matrix_tiles
from primitives.fc_nest import Product, data_product, extents, product_nest


def forward(g, plain=False, c_tiles=False):
    """y[n][k] = sum_c x[n][c] @ w[k][c]: x and y blocked, or plain matrices
    (the functional form; c_tiles: y in tiles all the same); w tiles
    [Kb][Cb][bc][bk] either way."""
    return data_product(g, plain, ("x", "w", "y"), out="k", over="c", c_tiles=c_tiles)


def forward_nest(ex, loops, g, dtype, epilogue, vnni=False, plain=False):
    """The forward's calls; epilogue(n, k) runs on the last c chunk."""
    product_nest(ex, loops, forward(g, plain), dtype, epilogue, g.chunk["fwd"], vnni)


def forward_plain_nest(ex, loops, g, dtype, epilogue, vnni=False):
    """forward_nest on plain x and y (N x C, N x K) and w tiles."""
    forward_nest(ex, loops, g, dtype, epilogue, vnni, plain=True)


# blocks of C per kernel call in forward_t: W's rows are read in place, 16 KiB
# apart on wide layers, and a long batch re-streams them per register tile
T_CHUNK = 4


def forward_t(g):
    """y^T (K x N) = W (K x C, plain, read in place as the broadcast operand) @
    x^T (C x N, tiles xt [Cb][Nb][bc][bn]), tile by tile into yt
    [Kb][Nb][bk][bn], whose epilogue (k, n) adds b per row and stores the tile
    transposed into the plain y (N x K): no copy of W, what the functional
    forward takes where the batch is smaller than the layer (fc.reads_w)."""
    return Product("k", "n", "c",
                   a=("w", matrix_tiles(g.K, g.C, g.bk, g.bc, ("k", "c"), plain=True)),
                   b=("xt", matrix_tiles(g.C, g.N, g.bc, g.bn, ("c", "n"))),
                   c=("yt", matrix_tiles(g.K, g.N, g.bk, g.bn, ("k", "n"))),
                   sizes=extents(g, plain=True), epilogue=("k", "n"))
