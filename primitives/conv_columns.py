"""Convolution's columns path (conv.columns): on small images with many
channels the functional forms read w in place as the K x C R S matrix it is
and work on x's im2col tiles (brgemm.im2col): which layers take it and the
plans of its three products (conv_forward.columns_product,
conv_backward.columns_data_product, conv_update.columns_update_product); the
functional forms that run them are in primitives/conv.py."""
import dataclasses

from brgemm import plan as bplan
from brgemm.info import kernel_path
from brgemm.layouts import nblocks, pick_block
from brgemm.loopspec import Loop, parse_spec
from brgemm.vnni import takes_vnni_b
from primitives._calls import blocks_per_call, reduction_calls
from primitives.conv_backward import columns_data_product
from primitives.conv_forward import columns_product
from primitives.conv_plans import SCHEMA, _plans
from primitives.conv_update import columns_update_product
from primitives.fc_nest import product_nest
from primitives.fc_plans import geometry as fc_geometry
from primitives.fc_plans import plan_copying


def columns(g, dtype, backend, pass_="fwd"):
    """The blocks (bd, bp) of the functional forward's im2col plan, or None
    where it does not apply. Where the weights outweigh the images (small
    images, many channels: N P Q at most K / 2), the forward reads w in place
    as the K x C R S matrix it is (columns_product) and copies x into its im2col
    tiles instead, R S times x's size but less than w's copy; all images'
    pixels side by side, so the kernel's rows are long even on 7 x 7 images.
    f32 on the CPU backend; in bf16 the forward alone (w bf16 already: nothing
    to round; conv.forward takes it where R S > 1), its tiles in VNNI pairs
    where the kernel reads them so (columns_vnni). (At any N on small images
    it won on the EPYC at one thread and lost on the Xeon at 16:
    benchmarks/RESULTS.md.) pass_: "fwd" for the
    forward, "bwd" for conv.backward's two passes, each where the config's
    `columns` of that pass allows."""
    if pass_ not in ("fwd", "bwd"):
        raise ValueError(f"pass_: expected 'fwd' or 'bwd', got {pass_!r}")
    if (dtype not in ("f32", "bf16") or backend != "cpu" or 2 * g.N * g.P * g.Q > g.K
            or not g.columns[pass_ == "bwd"]):
        return None
    return columns_blocks(g)


def columns_blocks(g):
    """The forward's im2col tiles (bd along C R S, bp along N P Q) on any
    layer, whether conv.columns takes it or not."""
    return pick_block(g.C * g.R * g.S, 128, 16), pick_block(g.N * g.P * g.Q, 64, 16)


def columns_y_rows(g):
    """The rows of the tiles in which conv.forward copies y^c [K][N][P Q] into
    y [N][K][P Q]: the plan's output-channel blocks, or all K (one tile an
    image) where they do not divide K."""
    return g.bk if g.K % g.bk == 0 else g.K


def columns_data_blocks(g):
    """Backward-data's tiles on w in place (bd along C R S, bp along N P Q)."""
    return (pick_block(g.C * g.R * g.S, COLUMNS_DATA_WIDTH, 16),
            pick_block(g.N * g.P * g.Q, COLUMNS_DATA_PIXELS))


def columns_update_width(g):
    """The width along C R S of the update's transposed im2col tiles (each
    image one pixel block)."""
    return pick_block(g.C * g.R * g.S, COLUMNS_UPDATE_WIDTH, 16)


def columns_vnni(g, dtype, backend, bd):
    """Whether conv.columns' forward reads its im2col tiles in VNNI pairs: bf16
    where the kernel takes pairs at depth bd and at the ragged last depth."""
    rest = g.C * g.R * g.S % bd
    return (dtype == "bf16" and takes_vnni_b(bd, dtype, backend)
            and (rest == 0 or takes_vnni_b(rest, dtype, backend)))


# conv.columns' plans read COLUMNS_CALLS times the pass's call_kb per kernel
# call: their C tiles (bp x bd, 32 KiB) cost more to reload between calls than
# the layer's (benchmarks/RESULTS.md: res5a_branch2b's backward-data 8% faster)
COLUMNS_CALLS = 16
# backward-data's pixel blocks (its dy^t and dx^c are plain matrices): all
# pixels of the 7 x 7 layers, so w's rows pass once (RESULTS.md). The update's
# are whole images (columns_update_product: dy read in place)
COLUMNS_DATA_PIXELS = 128
# and the tiles' width along C R S, where w and dW have their rows C R S floats
# apart (which maps them onto few cache sets): narrower than the forward's, so a
# call's rows of w stay in cache while the kernel walks the pixels (RESULTS.md:
# res5a_branch2b's backward 5-10% faster on the EPYC, 0-6% on the Xeon)
COLUMNS_DATA_WIDTH, COLUMNS_UPDATE_WIDTH = 48, 64


# conv.columns' forward splits its reduction (C R S) into one share per thread
# where the threads are few and the im2col tiles outweigh y^c (C R S >= 4 K):
# image_to_columns gives each thread a run of the tiles' rows, so each thread's
# calls then read only tiles that it wrote, not the ones the other cores have
# just written (which cost the Xeon 0.1-0.24 ms a call at 2 threads), and the
# shares' partial sums cost one pass over shares x K x N P Q floats. At C R S
# = 2 K (res5a_branch2a) that pass cost the EPYC more than the split saved;
# at K > C R S both hosts lost (benchmarks/RESULTS.md, issue 17, twenty-sixth
# session)
MAX_SHARES = 4


def columns_shares(g, dtype, bd, threads):
    """The forward's reduction shares (1: not split): `threads` for f32 where
    2 <= threads <= MAX_SHARES, C R S >= 4 K and every share has a block of
    bd rows."""
    D = g.C * g.R * g.S
    few = 2 <= threads <= MAX_SHARES and nblocks(D, bd) >= threads
    return threads if dtype == "f32" and few and D >= 4 * g.K else 1


def columns_plan(g, dtype, bd, bp, pass_="fwd", vnni=False, has_bias=False, shares=1):
    """The plan of one pass where conv.columns applies: the forward's
    (columns_product), backward-data's (columns_data_product) or the weight
    update's (columns_update_product); parallel over output tiles, each reduced
    in calls of COLUMNS_CALLS times call_kb's size. Backward-data walks w's
    column tiles outermost (faster than the other way on res5a_branch2b:
    benchmarks/RESULTS.md), the update dW's, so that each thread reads the
    rows of x's tiles that image_to_columns gave it (3-14% faster after it:
    RESULTS.md, twenty-sixth session). The update stores each dW tile with
    streaming stores (Block.c_stream): dW goes back to the caller, and its
    rows C R S apart would otherwise each be read into the cache before being
    written (RESULTS.md, twenty-eighth session). shares (the forward's alone;
    columns_shares): a task per share of the reduction's blocks instead,
    share s summed into y^c's part s ([shares][K][N P Q], tensor yc), b added
    in part 0."""
    if shares > 1 and pass_ != "fwd":
        raise ValueError(f"shares: the forward's alone, got {shares} for {pass_!r}")

    def record():
        product = {"fwd": columns_product, "bwd": columns_data_product,
                   "upd": columns_update_product}[pass_](g, bd, bp)
        (_, bi), (_, bj), (R, br) = (product.sizes[n] for n in (product.i, product.j, product.r))
        per_call = blocks_per_call(COLUMNS_CALLS * g.call_kb[list(SCHEMA).index(pass_)],
                                   (bi + bj) * br, dtype)
        outer = product.i + product.j if pass_ == "fwd" else product.j + product.i
        spec = "S" if shares > 1 else outer.upper() + product.r
        tensors = {product.a[0]: dtype, product.b[0]: dtype, product.c[0]: "f32"}
        epilogue = lambda *at: ()  # noqa: E731
        if has_bias:  # y^c's rows are the output channels (i, blocks of bi)
            tensors["b"] = "f32"
            product = dataclasses.replace(product, epilogue=(product.i,))
            epilogue = lambda i: (bplan.bias_rows("b", i * bi),)  # noqa: E731
        rec = bplan.Recorder(tensors, spec=spec)
        if shares > 1:
            shares_nest(rec, product, dtype, epilogue, per_call, shares, vnni)
        else:
            loops = parse_spec(spec, [Loop(n, 0, nblocks(*product.sizes[n]), per_call
                                           if n == product.r else 1)
                                      for n in (product.i, product.j, product.r)])
            product_nest(rec, loops, product, dtype, epilogue, per_call, vnni,
                         stream=pass_ == "upd")
        return rec.finish()
    return _plans.get((g, "columns", dtype, bd, bp, pass_, COLUMNS_CALLS, vnni, has_bias, shares),
                      record)


def shares_nest(rec, p, dtype, epilogue, chunk, shares, vnni=False):
    """Records product p's calls with its reduction (blocks of p.r) cut into
    `shares` runs of whole blocks, as image_to_columns cuts the tiles' rows
    among as many threads (to the tile where the threads divide the blocks,
    else to within a run of column blocks): task s sums run s of each C tile
    (i, j) into part s of C ([shares] x C's extent), pixel blocks (j) outside
    output blocks (i), in calls of `chunk` blocks; epilogue(i) on part 0's
    last call."""
    (a, A), (b, B), (c, C) = p.a, p.b, p.c
    (I, bi), (J, bj), (R, br) = p.sizes[p.i], p.sizes[p.j], p.sizes[p.r]
    Ib, Jb, Rb = nblocks(I, bi), nblocks(J, bj), nblocks(R, br)
    lds = dict(lda=A.ld(A.names[2]), ldb=B.ld(B.names[2]), ldc=C.ld(C.names[2]))
    part = I * C.ld(C.names[2])  # C's extent: I rows, ldc apart
    for s in range(shares):
        r0, r1 = Rb * s // shares, Rb * (s + 1) // shares
        rec.at(0, s)
        for j in range(Jb):
            for i in range(Ib):
                m, n = min(bi, I - i * bi), min(bj, J - j * bj)
                calls = [call for start in range(r0, r1, chunk) for call in
                         reduction_calls(range(start, min(start + chunk, r1)), Rb, R, br)]
                for k, (rs, depth) in enumerate(calls):
                    ops = epilogue(i) if s == 0 and k == len(calls) - 1 else ()
                    rec.gemm(bplan.Block(m, n, depth, dtype=dtype, beta=0.0 if k == 0 else 1.0,
                                         b_vnni=vnni, **lds),
                             a, [A.at(i, r) for r in rs], b, [B.at(r, j) for r in rs],
                             c, s * part + C.at(i, j), ops=ops)


def columns_data_copying(g):
    """Backward-data's plan where the config's columns_copies_w says so:
    dx^c [N P Q][C R S] = dy^T [N P Q][K] w [K][C R S] as fc's backward-data
    on the same plain matrices (fc_plans.plan_copying: tensors dy, w, wt, dx),
    w's tiles copied by the plan as its calls need them, so that no call
    reads w's rows C R S floats apart in place; its blocks (fc's bn, bc, bk)
    from the config's columns_copy_block."""
    b = g.columns_copy_block
    return plan_copying(fc_geometry(g.N * g.P * g.Q, g.C * g.R * g.S, g.K, blocks=(b, b, b),
                                    path=kernel_path("f32")), "bwd")
