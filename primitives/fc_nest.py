"""The one loop nest of FC's passes (fc_forward, fc_backward, fc_update), on
blocked tensors or the functional forms' plain matrices alike: a product of
tiled matrices, C[i][j] (+)= sum over r of A[i][r] @ B[r][j], whose three
operands are brgemm.layouts.Layouts with their tile grids named by the loops
(n, c, k) that walk them. Where an operand is a plain matrix its ragged edge
tiles get kernels of their sizes, and a ragged last reduction block a call of
its own (primitives._calls.reduction_calls); blocked tensors are zero-padded
to whole tiles, so their sizes are the padded ones and no tile is ragged."""
import dataclasses

from brgemm import plan as bplan
from brgemm.block import streams_c
from brgemm.layouts import Layout, matrix_tiles
from primitives._calls import reduction_calls


@dataclasses.dataclass(frozen=True)
class Product:
    """One pass as C[i][j] (+)= sum_r A[i][r] @ B[r][j] over tiles: i, j, r are
    loop names; a, b, c (tensor name, Layout) with the grid dimensions first,
    named by the loops ([i][r][..][..], [r][j][..][..], [i][j][..][..]);
    sizes: loop name -> (matrix extent, block) it walks; epilogue: the loop
    names of the epilogue's arguments, in order."""
    i: str
    j: str
    r: str
    a: tuple
    b: tuple
    c: tuple
    sizes: dict
    epilogue: tuple

    def __post_init__(self):
        for (name, lay), grid in ((self.a, (self.i, self.r)), (self.b, (self.r, self.j)),
                                  (self.c, (self.i, self.j))):
            if lay.names[:2] != grid:
                raise ValueError(f"{name}: its tile grid is {lay.names[:2]}, the product "
                                 f"walks it as {grid}")


def _dims(g):
    """Loop name -> (the layer's size, blocks, block) of the dimension it walks."""
    return {"n": (g.N, g.Nb, g.bn), "c": (g.C, g.Cb, g.bc), "k": (g.K, g.Kb, g.bk)}


def extents(g, plain, padded=""):
    """Loop name -> (the matrix extent it walks, its block) for geometry g: the
    layer's sizes where the operands are plain matrices, whole tiles where
    they are blocked and for the loops named in `padded`."""
    return {name: (size if plain and name not in padded else count * block, block)
            for name, (size, count, block) in _dims(g).items()}


def data_product(g, plain, names, out, over, c_tiles=False):
    """The forward's and the backward-data's product: C[n][out] = sum over
    `over` of A[n][over] @ W[over][out], A and C (minibatch rows) blocked or
    plain matrices, W tiles stored [out][over][b_over][b_out] either way;
    names: the tensors (A, W, C). c_tiles: C in tiles even where A is plain
    (an f32 scratch whose bf16 copy the epilogue stores plain)."""
    dims = _dims(g)
    (N, _, bn), (size_over, blocks_over, b_over), (size_out, blocks_out, b_out) = \
        dims["n"], dims[over], dims[out]
    w = Layout(**{out: blocks_out, over: blocks_over, "b" + over: b_over, "b" + out: b_out})
    return Product(
        "n", out, over,
        a=(names[0], matrix_tiles(N, size_over, bn, b_over, ("n", over), plain)),
        b=(names[1], w.transpose(over, out, "b" + over, "b" + out)),
        c=(names[2], matrix_tiles(N, size_out, bn, b_out, ("n", out), plain and not c_tiles)),
        sizes=extents(g, plain), epilogue=("n", out))


def product_nest(ex, loops, p, dtype, epilogue, chunk, vnni=False, stream=False):
    """Records p's calls: for each (i, j, r0) the loops walk, C's tile (i, j)
    reduced over `chunk` blocks from r0; epilogue(...) on the chunk with the
    last block; vnni: B tiles in VNNI pairs. stream: a call that makes its
    tile whole (all of the reduction, no epilogue) stores it with streaming
    stores where the block allows them (brgemm.block.streams_c)."""
    (a, A), (b, B), (c, C) = p.a, p.b, p.c
    (I, bi), (J, bj), (R, br) = p.sizes[p.i], p.sizes[p.j], p.sizes[p.r]
    Rb = -(-R // br)
    lds = dict(lda=A.ld(A.names[2]), ldb=B.ld(B.names[2]), ldc=C.ld(C.names[2]))
    blocks = {}  # kernel shapes by (m, n, k, beta, streamed), made once
    for phase, task, at in loops.walk():
        i, j, r0 = at[p.i], at[p.j], at[p.r]
        m, n = min(bi, I - i * bi), min(bj, J - j * bj)
        ex.at(phase, task)
        for rs, depth in reduction_calls(range(r0, min(r0 + chunk, Rb)), Rb, R, br):
            beta, ops = 0.0 if rs[0] == 0 else 1.0, ()
            if rs[-1] == Rb - 1:
                where = {p.i: i, p.j: j}
                ops = epilogue(*(where[name] for name in p.epilogue))
            streamed = (stream and rs[0] == 0 and rs[-1] == Rb - 1 and not ops
                        and streams_c(dtype, n, lds["ldc"]))
            blk = blocks.get((m, n, depth, beta, streamed))
            if blk is None:
                blk = blocks[m, n, depth, beta, streamed] = bplan.Block(
                    m, n, depth, dtype=dtype, beta=beta, b_vnni=vnni, c_stream=streamed, **lds)
            ex.gemm(blk, a, [A.at(i, r) for r in rs], b, [B.at(r, j) for r in rs],
                    c, C.at(i, j), ops=ops)
