"""Fully connected layers, forward, as a tiled product (primitives/fc_nest.py;
primitives/fc.py has the layouts, the geometry and the plans that record it)."""
from primitives.fc_nest import data_product, product_nest


def forward(g, plain=False):
    """y[n][k] = sum_c x[n][c] @ w[k][c]: x and y blocked, or plain matrices
    (the functional form); w tiles [Kb][Cb][bc][bk] either way."""
    return data_product(g, plain, ("x", "w", "y"), out="k", over="c")


def forward_nest(ex, loops, g, dtype, epilogue, vnni=False, plain=False):
    """The forward's calls; epilogue(n, k) runs on the last c chunk."""
    product_nest(ex, loops, forward(g, plain), dtype, epilogue, g.chunk["fwd"], vnni)


def forward_plain_nest(ex, loops, g, dtype, epilogue, vnni=False):
    """forward_nest on plain x and y (N x C, N x K) and w tiles."""
    forward_nest(ex, loops, g, dtype, epilogue, vnni, plain=True)
