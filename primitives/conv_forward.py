"""2-D convolution, forward: the loop nest (see primitives/conv.py for the
layouts, the geometry and the plans that record this nest)."""
import math

from brgemm import plan as bplan
from brgemm.layouts import Layout, matrix_tiles, nblocks
from primitives._calls import blocks_per_call, record_grouped, slot_in_group, tile_groups
from primitives.fc_nest import Product


def forward_nest(ex, loops, g, dtype, vnni=False, epilogue=None, tile=None, x_nchw=False):
    """y[n][k][p][q0:q0+bq] = sum_{c, r, s} x[n][c][p*sh + r][(q0 + i)*sw + s] @ w[k][c][r][s].
    With g.span[0] (conv_plans.spans_rows) p is 0 and q0 counts the P x Q
    pixels in blocks of bs that run on across rows. epilogue(n, k, pixel):
    the ops of a tile's last call (pixel = p Q + q0, its first pixel);
    tile(task, j): where in y the task sums its tiles, j (0 .. g.w_reuse[0] - 1)
    counting them in turn (the epilogue stores them), instead of each tile's
    own place. g.w_reuse[0] tiles of a task take each call's weight blocks
    in turn (_calls.record_grouped)."""
    x = Layout(N=g.N, Cb=g.Cb, Hp=g.Hp, Wp=g.Wp, bc=g.bc)
    w = Layout(Kb=g.Kb, Cb=g.Cb, R=g.R, S=g.S, bc=g.bc, bk=g.bk)
    y = Layout(N=g.N, Kb=g.Kb, P=g.P, Q=g.Q, bk=g.bk)
    bq, row = (g.bs, g.P * g.Q) if g.span[0] else (g.bq, g.Q)
    taps = [(c, r, s) for c in range(g.Cb) for r in range(g.R) for s in range(g.S)]

    blocks = {}  # (m, beta) -> its Block, made once: one a call took a third of the recording

    def block(m, beta):
        if (m, beta) not in blocks:  # A's rows: pixels sw apart; x_nchw: its columns, HW apart
            blocks[m, beta] = bplan.Block(m, g.bk, g.bc, lda=g.H * g.W if x_nchw else
                                          g.sw * x.ld("Wp"), ldb=w.ld("bc"), ldc=y.ld("Q"),
                                          dtype=dtype, beta=beta, b_vnni=vnni, a_t=x_nchw)
        return blocks[m, beta]
    slot = slot_in_group(g.w_reuse[0])

    def tiles():
        for phase, task, at in loops.walk():
            n, k, p, q0 = at["n"], at["k"], at["p"], at["q"]
            m = min(bq, row - q0)
            per_call = blocks_per_call(g.call_kb[0], (m + g.bk) * g.bc, dtype)
            to = y.at(n, k, p, q0) if tile is None else tile(task, slot(task))
            if x_nchw:
                yield phase, task, [
                    (block(width, beta), "x", xs, "w", ws, "y", to + (lo - q0) * y.ld("Q"),
                     epilogue(n, k, p * g.Q + q0) if last and epilogue else ())
                    for lo, width, beta, last, xs, ws in nchw_tile_calls(g, dtype, w.at, n, k,
                                                                          p, q0, m)]
                continue
            calls = []
            for i in range(0, len(taps), per_call):
                last = epilogue is not None and i + per_call >= len(taps)
                calls.append((block(m, 0.0 if i == 0 else 1.0),
                              "x", [x.at(n, c, p * g.sh + r, q0 * g.sw + s)
                                    for c, r, s in taps[i:i + per_call]],
                              "w", [w.at(k, c, r, s) for c, r, s in taps[i:i + per_call]],
                              "y", to, epilogue(n, k, p * g.Q + q0) if last else ()))
            yield phase, task, calls
    record_grouped(ex, tiles(), g.w_reuse[0])


def nchw_tile_groups(g, p, q0, m, cs=None):
    """The taps of output row p's pixels q0 .. q0 + m - 1 on x in place
    (NCHW, stride 1 across), grouped by the pixels they reach: {(first
    pixel, last + 1): [(c, r, s), ...]}, taps in (c, r, s) order, of the
    channel blocks cs (all of them if None). Taps whose input row is padding
    are left out; a tap that reaches padding columns leaves those pixels out
    of its group's range."""
    groups = {}
    for c in range(g.Cb) if cs is None else cs:
        for r in range(g.R):
            if 0 <= p * g.sh + r - g.ph < g.H:
                for s in range(g.S):
                    lo, hi = max(q0, g.pw - s), min(q0 + m, g.W + g.pw - s)
                    if lo < hi:
                        groups.setdefault((lo, hi), []).append((c, r, s))
    return groups


def nchw_tile_calls(g, dtype, w_at, n, k, p, q0, m, cs=None, begins=True, ends=True, x_at=None):
    """forward_nest's calls of one tile on x in place (x_nchw): (first pixel,
    width, beta, last, x offsets, w offsets: w_at(k, c, r, s)) each; x_at(c,
    h, col): where x's row h of channel block c starts its column col (x's own
    place in the NCHW array if None). The taps
    that reach all m pixels come first (one call, beta 0, which writes the
    whole tile) and last (the call whose epilogue stores the tile); the taps
    of the pixels away from the padding go between. A group's calls read
    call_kb KiB. cs: only the taps of those channel blocks, a share of the
    tile's reduction that begins it (the first call as above) or not (all
    calls beta 1), and ends it (the last call as above) or not."""
    HW = g.H * g.W
    if x_at is None:
        x_at = lambda c, h, col: (n * g.C + c * g.bc) * HW + h * g.W + col  # noqa: E731
    groups = nchw_tile_groups(g, p, q0, m, cs)
    full = groups.pop((q0, q0 + m))  # the rule (reads_x_nchw) has every tile keep one

    def chunks(lo, hi, taps):
        per = blocks_per_call(g.call_kb[0], (hi - lo + g.bk) * g.bc, dtype)
        return [(lo, hi, taps[i:i + per]) for i in range(0, len(taps), per)]
    whole = chunks(q0, q0 + m, full)
    partial = [ch for (lo, hi), taps in groups.items() for ch in chunks(lo, hi, taps)]
    order = partial + whole
    if begins:
        first, *rest = whole
        if partial and not rest and ends:  # the first call writes the tile, a whole one stores it
            first, rest = (q0, q0 + m, first[2][:1]), [(q0, q0 + m, first[2][1:])]
        order = [first] + partial + rest
    return [(lo, hi - lo, 0.0 if begins and i == 0 else 1.0, ends and i == len(order) - 1,
             [x_at(c, p * g.sh + r - g.ph, lo + s - g.pw) for c, r, s in taps],
             [w_at(k, c, r, s) for c, r, s in taps])
            for i, (lo, hi, taps) in enumerate(order)]


def nchw_copying_nest(ex, loops, g, epilogue):
    """The forward on x in place (NCHW, as forward_nest's x_nchw) and w as
    given, [K][C][R][S]: each task copies the weight tiles it reads itself,
    one channel block at a time (copy_taps: the R S tiles of (k, c), bc x bk
    each, tap_stride apart, into the task's own slot of wt), and its tiles of
    one k (kept in slots of y, bq x bk each, until the last block stores
    them) take that block's taps in turn, call by call, before the next block
    is copied over it. No blocked copy of w is written out and read back;
    each call's w blocks serve all the tiles from the core's cache.
    epilogue(n, k, pixel) as forward_nest's. Tasks and their tiles: the
    config's loop order."""
    tasks = {}
    for phase, task, at in loops.walk():
        tasks.setdefault((phase, task), {}).setdefault(at["k"], []).append((at["n"], at["p"],
                                                                            at["q"]))
    group = max(len(tiles) for by_k in tasks.values() for tiles in by_k.values())
    RS, HW, tile_w, tile_y = g.R * g.S, g.H * g.W, bplan.tap_stride(g.bc, g.bk), g.bq * g.bk
    blocks = {}

    def block(m, beta):
        if (m, beta) not in blocks:
            blocks[m, beta] = bplan.Block(m, g.bk, g.bc, lda=HW, ldb=g.bk, ldc=g.bk, beta=beta,
                                          a_t=True)
        return blocks[m, beta]
    for slot, ((phase, task), by_k) in enumerate(tasks.items()):
        wt = slot * RS * tile_w
        for k, tiles in by_k.items():
            for cb in range(g.Cb):
                calls = [[(block(width, beta), "x", xs, "wt", ws, "y",
                           (slot * group + j) * tile_y + (lo - q0) * g.bk,
                           epilogue(n, k, p * g.Q + q0) if last else ())
                          for lo, width, beta, last, xs, ws in nchw_tile_calls(
                              g, "f32", lambda k, c, r, s: wt + (r * g.S + s) * tile_w, n, k, p,
                              q0, min(g.bq, g.Q - q0), [cb], cb == 0, cb == g.Cb - 1)]
                         for j, (n, p, q0) in enumerate(tiles)]
                *args, ops = calls[0][0]  # the block's first call copies its taps' tiles
                calls[0][0] = (*args, (bplan.copy_taps("w", (k * g.bk * g.C + cb * g.bc) * RS,
                                                       g.C * RS, RS, "wt", wt),) + tuple(ops))
                record_grouped(ex, ((phase, task, tile) for tile in calls), len(calls))


def nchw_ring_nest(ex, loops, g, epilogue, tile):
    """The forward on x in place (NCHW, stride 1 across, as forward_nest's
    x_nchw) in blocked rows: each task copies the rows of x its tiles read
    into a ring of its own in xr (ring_tiles' rows of Cb blocks, W pixels of
    bc channels each: copy_at), each row just before the first call of the
    group of tiles (record_grouped) that reads it first, so the kernel reads
    x as blocked rows [pixels][bc] from the core's cache and no blocked copy
    of x is written out and read back. w blocked (conv.block_w); tile(task,
    j) and epilogue(n, k, pixel) as forward_nest's. A task's tiles may span
    images: its ring holds rows by n H + h."""
    HW, row = g.H * g.W, g.W * g.bc
    w = Layout(Kb=g.Kb, Cb=g.Cb, R=g.R, S=g.S, bc=g.bc, bk=g.bk)
    tiles, groups, ring = ring_tiles(loops, g)
    slots, blocks, slot = {}, {}, slot_in_group(g.w_reuse[0])

    def block(m, beta):
        if (m, beta) not in blocks:
            blocks[m, beta] = bplan.Block(m, g.bk, g.bc, lda=g.bc, ldb=w.ld("bc"), ldc=g.bk,
                                          beta=beta)
        return blocks[m, beta]

    def recorded():
        held = {}  # (phase, task) -> {ring row: the image row (n H + h) it holds}
        for group in groups:
            phase, task = tiles[group[0]][:2]
            base = slots.setdefault((phase, task), len(slots)) * ring * g.Cb * row

            def at(n, h, c):  # where image n's row h of channel block c lies in the ring
                return base + ((n * g.H + h) % ring * g.Cb + c) * row
            rows, calls = held.setdefault((phase, task), {}), []
            for phase, task, n, k, p, q0 in (tiles[i] for i in group):
                def x_at(c, h, col, n=n):
                    return at(n, h, c) + col * g.bc
                to = tile((phase, task), slot((phase, task)))
                calls.append([(block(width, beta), "xr", xs, "w", ws, "y", to + (lo - q0) * g.bk,
                               epilogue(n, k, p * g.Q + q0) if last else ())
                              for lo, width, beta, last, xs, ws in nchw_tile_calls(
                                  g, "f32", w.at, n, k, p, q0, min(g.bq, g.Q - q0), x_at=x_at)])
            copies = []
            for n, h in sorted({(t[2], t[4] * g.sh + r - g.ph) for t in (tiles[i] for i in group)
                                for r in range(g.R) if 0 <= t[4] * g.sh + r - g.ph < g.H}):
                if rows.get((n * g.H + h) % ring) != n * g.H + h:
                    rows[(n * g.H + h) % ring] = n * g.H + h
                    copies += [bplan.copy_at("x", (n * g.C + c * g.bc) * HW + h * g.W, HW, g.W,
                                             "xr", at(n, h, c)) for c in range(g.Cb)]
            *args, ops = calls[0][0]  # the group's first call copies its new rows first
            calls[0][0] = (*args, tuple(copies) + tuple(ops))
            yield from ((phase, task, c) for c in calls)
    record_grouped(ex, recorded(), g.w_reuse[0])


def ring_tiles(loops, g):
    """nchw_ring_nest's tiles, (phase, task, n, k, p, q0) in the nest's order,
    the groups record_grouped makes of them (lists of indices) and how many
    rows its rings hold: the most image rows (n H + h) one group spans, so
    that the rows of a group never share a ring row."""
    tiles = [(phase, task, at["n"], at["k"], at["p"], at["q"])
             for phase, task, at in loops.walk()]
    groups = tile_groups([t[:2] for t in tiles], g.w_reuse[0])

    def span(group):
        rows = [tiles[i][2] * g.H + tiles[i][4] * g.sh + r - g.ph for i in group
                for r in range(g.R) if 0 <= tiles[i][4] * g.sh + r - g.ph < g.H]
        return max(rows) - min(rows) + 1 if rows else 1
    return tiles, groups, max(map(span, groups))


def pointwise_nest(ex, loops, g, dtype, bp, plain_w=True, pairs=False, hx=None, has_bias=False,
                   w_t=False, tail=0):
    """1x1, stride 1, no padding, C a multiple of bc (see conv.pointwise): per
    image y[n] (K x HW, plain NCHW) = w (K x C, plain, read in place as the
    broadcast operand; or, not plain_w, as tiles [Kb][Cb][bk][bc]; or, w_t,
    read in place as the transpose of the plain C x K matrix given, the
    kernel's transposed A: backward-data on the layer's own w) @ x[n] (C
    x HW, plain NCHW, read in place: rows of pixels, HW apart), in pixel
    blocks of bp. No copy of x or y, nor of a plain w. pairs (bf16): x[n]'s
    rows in VNNI pairs ([C / 2][HW][2], pixel p of rows c, c + 1 at c HW + 2
    p), each finished block of y also stored rounded into y16 (NCHW). hx: x's
    rows that many floats apart (a copy of x on whole-line rows), not HW.
    has_bias: b[k] (tensor b, f32) added to each finished block's rows.
    tail (f32, neither pairs nor w_t): each image's last `tail` pixels are left out of
    the pixel blocks (loops' p covers H W - tail) and computed for all images
    at once, y^t (K x N tail, tensor yt) = w @ x^t (C x N tail, tensor xt:
    image n's last pixels at columns n tail ..), so that their vectors are
    full where each image's own would be mostly empty (conv_pointwise.
    pointwise_tail); output block k's tail blocks are calls of the task of
    image k mod N's last pixel block (every thread gets some), in calls of
    g.pointwise_tail_rows rows of w: a tail a vector or two wide leaves the
    kernel's register tile all of a call's rows of w (the broadcast operand),
    and 64 rows C floats apart (4 KiB on C = 1024: one set of the L1 cache)
    missed that cache on every broadcast (1024 -> 256 on 14 x 14, EPYC: 5%
    slower than without the tail in calls of 64 rows, 3% faster in calls of
    8; benchmarks/RESULTS.md, issue 17, forty-first session)."""
    HW, Cb = g.H * g.W, g.Cb
    if w_t:  # tile (c, k) of the C x K matrix, K floats a row, holds tile (k, c)'s transpose
        wc = matrix_tiles(g.C, g.K, g.bc, g.bk, ("c", "k"), plain=True)
        lda, w_at = wc.ld("bc"), lambda k, c: wc.at(c, k)
    else:
        w = matrix_tiles(g.K, g.C, g.bk, g.bc, ("k", "c"), plain=plain_w)
        lda, w_at = w.ld("bk"), w.at
    x = Layout(N=g.N, C=g.C, HW=hx or HW)
    y = Layout(N=g.N, K=g.K, HW=HW)
    per_call = blocks_per_call(g.pointwise_kb, (g.bk + bp) * g.bc, dtype)
    if tail:
        if pairs or w_t:  # (a tail call's rows r0 on start r0 rows of plain w, not of w^T)
            raise ValueError("tail: only the f32 forward on w computes the images' last pixels "
                             "apart")
        xt, yt = Layout(C=g.C, J=g.N * tail), Layout(K=g.K, J=g.N * tail)
    last_p = nblocks(HW - tail, bp) - 1

    def calls(m, width, k, x_name, x_offs, ldb, y_name, y_off, ldc, y16_off=None, r0=0):
        """Rows r0 .. r0 + m of output block k, `width` columns."""
        for c0 in range(0, Cb, per_call):  # the reduction over C, per_call blocks a call
            cs = range(c0, min(c0 + per_call, Cb))
            last = cs[-1] == Cb - 1
            ops = ((bplan.bias_rows("b", k * g.bk + r0),) if has_bias and last else ()) + (
                (bplan.store_bf16("y16", y16_off, HW),) if y16_off is not None and last else ())
            ex.gemm(bplan.Block(m, width, g.bc, lda=lda, ldb=ldb, ldc=ldc, dtype=dtype,
                                beta=0.0 if c0 == 0 else 1.0, b_vnni=pairs, a_t=w_t),
                    "w", [w_at(k, c) + r0 * lda for c in cs], x_name, [x_offs(c) for c in cs],
                    y_name, y_off, ops=ops)

    for phase, task, at in loops.walk():
        n, k, p = at["n"], at["k"], at["p"]
        m, width = min(g.bk, g.K - k * g.bk), min(bp, HW - tail - p * bp)
        ex.at(phase, task)
        shift = p * bp if pairs else 0  # the pixel's place in a pair row: 2 p
        calls(m, width, k, "x", lambda c: x.at(n, c * g.bc, p * bp) + shift, x.ld("C"),
              "y", y.at(n, k * g.bk, p * bp), ldc=y.ld("K"),
              y16_off=y.at(n, k * g.bk, p * bp) if pairs else None)
        if tail and p == last_p and n == k % g.N:
            for j in range(0, g.N * tail, bp):  # output block k's tail blocks
                for r0 in range(0, m, g.pointwise_tail_rows):
                    calls(min(g.pointwise_tail_rows, m - r0), min(bp, g.N * tail - j), k, "xt",
                          lambda c: xt.at(c * g.bc, j), xt.ld("C"), "yt",
                          yt.at(k * g.bk + r0, j), ldc=yt.ld("K"), r0=r0)


def columns_product(g, bd, bp):
    """y^c (K x N P Q: output channels by the pixels of all images, plain) = w
    (K x C R S, plain, read in place as the broadcast operand) @ the im2col
    matrix, as tiles xc [Pb][Db][bd][bp] (brgemm.im2col.image_to_columns):
    the tiled product (primitives.fc_nest) conv.columns' forward records. No
    weight copy; y^c holds y with its first two axes swapped."""
    D, cols, weights, pixels, sizes = columns_operands(g, bd, bp)
    xc = Layout(p=nblocks(cols, bp), d=nblocks(D, bd), bd=bd, bp=bp)
    return Product("k", "p", "d", a=("w", weights), b=("xc", xc.transpose("d", "p", "bd", "bp")),
                   c=("yc", pixels), sizes=sizes, epilogue=())


def columns_operands(g, bd, bp):
    """What conv.columns' three products share: the im2col matrix's sizes D =
    C R S and N P Q, the weights (w, dw) as plain K x D tiles, the forward's
    pixels (y^c) as plain K x N P Q tiles, and the loop sizes."""
    D, cols = g.C * g.R * g.S, g.N * g.P * g.Q
    return (D, cols, matrix_tiles(g.K, D, g.bk, bd, ("k", "d"), plain=True),
            matrix_tiles(g.K, cols, g.bk, bp, ("k", "p"), plain=True),
            {"k": (g.K, g.bk), "p": (cols, bp), "d": (D, bd)})


def line_period(HW):
    """L: rows of HW floats back to back start where they start on a 64-byte
    line every L rows."""
    return 16 // math.gcd(HW, 16)


def row_classes(rows, HW, align):
    """The classes of an NCHW array's pixel rows (`rows` of HW elements, its
    first element `align` elements past a 16-float line) by where they start
    on a line: rows c = r, r + L, r + 2 L, .. (L = line_period(HW), a divisor
    of `rows`; else None) start alike. [(r, s)]: s, the first pixel of the
    rows of class r that starts a line."""
    L = line_period(HW)
    return [(r, -(align + r * HW) % 16) for r in range(L)] if rows % L == 0 else None


def line_blocks(HW, s, bp):
    """(first pixel, width) of the pixel blocks of a class whose rows start
    lines at pixel s: the head [0, s), then blocks of bp (a multiple of 16)
    from s, a last remainder of under 16 pixels joined to the block before it."""
    starts = list(range(s, HW, bp))
    if len(starts) > 1 and HW - starts[-1] < 16:
        starts.pop()
    return ([(0, s)] if s else []) + [(j, (starts[i + 1] if i + 1 < len(starts) else HW) - j)
                                      for i, j in enumerate(starts)]


def aligned_pointwise_nest(ex, loops, g, dtype, bp, align):
    """pointwise_nest's product, y[n] = w @ x[n] on NCHW arrays in place, its
    reduction split by row_classes of x[n] (its first element `align` floats
    past a line), so that every kernel call loads x's 16-pixel vectors from
    whole lines: the calls of class r reduce over its rows (L HW apart) on
    pixel blocks that start where those rows start lines (line_blocks). w in
    tiles of each class, [L][Kb][C / L / bc][bk][bc] (conv_pointwise.
    class_tiles). A task per image and output block; class 0's calls write
    y (beta 0), the others add."""
    HW, C, bk, bc = g.H * g.W, g.C, g.bk, g.bc
    classes = row_classes(C, HW, align)
    L = len(classes)
    tiles = C // L // bc  # of a class, along the reduction
    per_call = blocks_per_call(g.pointwise_kb, (bk + bp) * bc, dtype)
    calls = [range(i, min(i + per_call, tiles)) for i in range(0, tiles, per_call)]
    for phase, task, at in loops.walk():
        n, k = at["n"], at["k"]
        m = min(bk, g.K - k * bk)
        ex.at(phase, task)
        for r, s in classes:
            for j0, width in line_blocks(HW, s, bp):
                for first, items in zip([r == 0] + [False] * len(calls), calls):
                    ex.gemm(bplan.Block(m, width, bc, lda=bc, ldb=L * HW, ldc=HW, dtype=dtype,
                                        beta=0.0 if first else 1.0),
                            "w", [((r * g.Kb + k) * tiles + i) * bk * bc for i in items],
                            "x", [(n * C + r + L * i * bc) * HW + j0 for i in items],
                            "y", (n * g.K + k * bk) * HW + j0)
