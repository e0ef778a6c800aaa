"""Fully connected layers, backward-data, as a tiled product (primitives/fc_nest.py;
primitives/fc.py has the layouts, the geometry and the plans that record it)."""
from primitives.fc_nest import data_product, product_nest


def backward(g, plain=False, c_tiles=False):
    """dx[n][c] = sum_k dy[n][k] @ wt[c][k]: dy and dx blocked, or plain
    matrices (the functional form; c_tiles: dx in tiles all the same); wt
    tiles [Cb][Kb][bk][bc] either way."""
    return data_product(g, plain, ("dy", "wt", "dx"), out="c", over="k", c_tiles=c_tiles)


def backward_nest(ex, loops, g, dtype, epilogue, vnni=False, plain=False):
    """The backward-data's calls; epilogue(n, c) runs on the last k chunk."""
    product_nest(ex, loops, backward(g, plain), dtype, epilogue, g.chunk["bwd"], vnni)


def backward_plain_nest(ex, loops, g, dtype, epilogue, vnni=False):
    """backward_nest on plain dy and dx (N x K, N x C) and wt tiles."""
    backward_nest(ex, loops, g, dtype, epilogue, vnni, plain=True)
