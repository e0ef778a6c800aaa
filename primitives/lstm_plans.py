"""The LSTM's geometry, its recurrent nests (forward and backward through
time) and their plans; the layer (primitives.lstm_layer) drives them and
primitives.lstm is the public face. Layouts and formulas: primitives/lstm.py."""
import dataclasses
from functools import cached_property

from brgemm import plan as bplan
from brgemm.layouts import Layout, nblocks, pick_block
from brgemm.loopspec import Loop, parse_spec
from brgemm.lru import HashedOnce
from brgemm.machine import cpu_threads
from primitives._calls import blocks_per_call, reduction_calls
from primitives import fc
from primitives._config import settings


SCHEMA = {"spec": str, "bn": int, "bc": int, "bk": int, "call_kb": int,
          "proj_spec": str, "proj_chunk": int, "proj_group": int, "dx_spec": str,
          "dx_chunk": int, "dx_group": int, "dw_spec": str, "dw_chunk": int, "dw_group": int}

_plans = bplan.PlanCache(maxsize=32)


@dataclasses.dataclass(frozen=True)
class Geometry(HashedOnce):
    T: int
    N: int
    C: int
    K: int
    bn: int
    bc: int
    bk: int
    spec: str
    call_kb: int  # the recurrent and BPTT nests read at most this many KiB per call
    # loop orders, reduction chunks and loop groups of the hoisted FC plans
    # (fc's fwd, bwd, upd nests): input projection, backward-data (dx, dh0),
    # weight updates; from lstm.toml's proj_*, dx_*, dw_*
    fc_specs: tuple
    fc_chunks: tuple
    fc_groups: tuple
    __hash__ = HashedOnce.__hash__  # plan caches hash it on every call

    # sizes derived from the fields, computed on first use (plans and calls read them often)
    Nb = cached_property(lambda g: nblocks(g.N, g.bn))
    Cb = cached_property(lambda g: nblocks(g.C, g.bc))
    Kb = cached_property(lambda g: nblocks(g.K, g.bk))
    Kp = cached_property(lambda g: g.Kb * g.bk)

    # the hoisted GEMMs with W_ih as an FC layer: rows = all steps' minibatch (made
    # once: asked for per call, lstm_strips.copies_w)
    fc_input = cached_property(lambda g: fc.Geometry(
        g.T * g.Nb * g.bn, g.C, 4 * g.Kp, g.bn, g.bc, g.bk, g.fc_specs, g.fc_chunks, g.fc_groups))

    def fc_hidden(self, steps=1, bc=None):
        """W_hh as an FC layer over `steps` steps' hidden states (inputs in
        blocks of bc, default bk)."""
        return fc.Geometry(steps * self.Nb * self.bn, self.Kp, 4 * self.Kp, self.bn,
                           bc or self.bk, self.bk, self.fc_specs, self.fc_chunks,
                           self.fc_groups)

    fc_step = cached_property(lambda g: g.fc_hidden(1))  # one step's: asked for per call

    # dW_hh's tiles pair two hidden blocks (64 x 32 at bk = 32, as dW_ih's):
    # on square 32 x 32 tiles its update was measurably slower than dW_ih's
    # (benchmarks/RESULTS.md)
    hpair = cached_property(lambda g: 2 if g.Kb % 2 == 0 else 1)

    def layouts(self):
        """The recurrent nests' tensors: the states h, c (and dy) of steps 0..T,
        the gates G (and dG) of steps 0..T-1, four per hidden block, and wh
        (wht: its transpose's tiles)."""
        Nb, Kb, bn, bk = self.Nb, self.Kb, self.bn, self.bk
        return (Layout(t=self.T + 1, n=Nb, k=Kb, bn=bn, bk=bk),
                Layout(t=self.T, n=Nb, q=4, k=Kb, bn=bn, bk=bk),
                Layout(q=4, k=Kb, j=Kb, bk=bk, bk2=bk))


def geometry(T, N, C, K, config=None, path=None):
    """path: the kernel path (brgemm.info.kernel_path), whose config tables apply."""
    cfg = settings("lstm", "fwd", {"T": T, "N": N, "C": C, "K": K}, SCHEMA, config, path)
    return Geometry(T, N, C, K, pick_block(N, cfg["bn"]), pick_block(C, cfg["bc"], 16),
                    pick_block(K, cfg["bk"], 16), cfg["spec"], cfg["call_kb"],
                    (cfg["proj_spec"], cfg["dx_spec"], cfg["dw_spec"]),
                    (cfg["proj_chunk"], cfg["dx_chunk"], cfg["dw_chunk"]),
                    tuple(cfg.get(p + "_group") for p in ("proj", "dx", "dw")))


# ---------------------------------------------------------------- the recurrent nest

def recurrent_nest(ex, loops, g, dtype, vnni=False):
    """Per step t: G[t][n][q][k] += sum_j h[t][n][j] @ wh[q][k][j] for q = i, f, g, o;
    the call of the last gate carries the cell (c[t+1], h[t+1] from c[t] and G[t])."""
    blk = bplan.Block(g.bn, g.bk, g.bk, lda=g.bk, ldb=g.bk, ldc=g.bk, dtype=dtype, beta=1.0,
                      b_vnni=vnni)
    h_in = "h16" if dtype == "bf16" else "h"
    state, G, wh = g.layouts()
    per_call = blocks_per_call(g.call_kb, (g.bn + g.bk) * g.bk, dtype)
    for phase, task, at in loops.walk():
        t, n, k = at["t"], at["n"], at["k"]
        ex.at(phase, task)
        now, nxt = state.at(t, n, k), state.at(t + 1, n, k)   # h, c block (n, k) of t, t+1
        hs = [state.at(t, n, j) for j in range(g.Kb)]
        for q in range(4):
            ops = ()
            if q == 3:
                extra = dict(h16="h16", h16_offset=nxt) if dtype == "bf16" else {}
                ops = (bplan.lstm_cell("G", G.at(t, n, 0, k), G.ld("q"), "c", now, "c", nxt,
                                       "h", nxt, g.bk, **extra),)
            for i in range(0, g.Kb, per_call):  # G already holds the input projection: beta 1
                ex.gemm(blk, h_in, hs[i:i + per_call],
                        "wh", [wh.at(q, k, j) for j in range(i, min(i + per_call, g.Kb))],
                        "G", G.at(t, n, q, k), ops=ops if i + per_call >= g.Kb else ())


def _step_loops(g):
    """The recurrent and BPTT nests' loops t, n, k ordered by the spec. Every
    hidden block of step t reads all of step t-1's: t must be outside k, or the
    nest itself reads states not yet computed (no barrier can fix that; the
    plan's race check catches the other wrong specs)."""
    loops = parse_spec(g.spec, [Loop("t", 0, g.T, 1), Loop("n", 0, g.Nb, 1),
                                Loop("k", 0, g.Kb, 1)], where="config: ")
    order = [lv.loop for lv in loops.levels]
    if order.index("t") > order.index("k"):
        raise ValueError(f"config: spec {g.spec!r}: the time loop t must come before the hidden "
                         "loop k (each step reads all hidden blocks of the step before)")
    return loops


def recurrent_plan(g, dtype, vnni=False):
    def record():
        tensors = {"G": "f32", "c": "f32", "h": "f32", "wh": dtype}
        if dtype == "bf16":
            tensors["h16"] = "bf16"
        rec = bplan.Recorder(tensors, spec=g.spec)
        recurrent_nest(rec, _step_loops(g), g, dtype, vnni)
        return rec.finish()
    return _plans.get(("rec", g, dtype, vnni), record)


def backward_nest(ex, loops, g, dtype="f32", vnni=False):
    """Steps t = T-1 .. 0, a phase each: dh[n][k] = sum_{q, j} dG[t+1][n][q][j] @
    wht[k][q][j] (the dh flowing back from the next step; at the last step dhr
    already holds dhT), then the cell's derivatives on that block as an
    epilogue: dG[t] for the four gates, and dc for the step before. bf16: the
    epilogue also rounds dG into dG16, the bf16 operand of the next step's GEMM
    (and of the weight-gradient plans); the cell itself is f32."""
    state, G, _ = g.layouts()                       # dy, c: as h; dG: as G
    wht = Layout(k=g.Kb, q=4, j=g.Kb, bk=g.bk, bk2=g.bk)
    per_call = blocks_per_call(g.call_kb, (g.bn + g.bk) * g.bk, dtype)
    dg_in = "dG16" if dtype == "bf16" else "dG"
    for phase, task, at in loops.walk():
        t, n, k = g.T - 1 - at["t"], at["n"], at["k"]
        ex.at(phase, task)
        st = state.at(0, n, k)                         # dc and dhr hold one step
        gates = G.at(t, n, 0, k)                       # gate i of block (n, k) at step t
        op = bplan.lstm_cell_bwd("dy", state.at(t, n, k), "G", gates, G.ld("q"), "c",
                                 state.at(t + 1, n, k), state.at(t, n, k), "dc", st, "dG", gates,
                                 g.bk, dgates16="dG16" if dtype == "bf16" else None)
        qj = [(q, j) for q in range(4) for j in range(g.Kb)] if t < g.T - 1 else []
        starts = list(range(0, len(qj), per_call)) or [0]  # the last step: dhr holds dhT
        for i in starts:
            part = qj[i:i + per_call]
            ex.gemm(bplan.Block(g.bn, g.bk, g.bk, lda=g.bk, ldb=g.bk, ldc=g.bk, dtype=dtype,
                                beta=0.0 if qj and i == 0 else 1.0, b_vnni=vnni),
                    dg_in, [G.at(t + 1, n, q, j) for q, j in part],
                    "wht", [wht.at(k, q, j) for q, j in part],
                    "dhr", st, ops=(op,) if i == starts[-1] else ())


def backward_plan(g, dtype="f32", vnni=False):
    def record():
        tensors = dict.fromkeys(("dy", "G", "c", "dc", "dG", "dhr"), "f32")
        tensors["wht"] = dtype
        if dtype == "bf16":
            tensors["dG16"] = "bf16"
        rec = bplan.Recorder(tensors, spec=g.spec)
        backward_nest(rec, _step_loops(g), g, dtype, vnni)
        return rec.finish()
    return _plans.get(("bptt", g, dtype, vnni), record)


# ---------------------------------------------------------------- the input projection, W_ih in place

def projection_t_nest(ex, loops, g, chunk, hidden=False, per_task=False, tiles=False,
                      dtype="f32", pairs=frozenset()):
    """G[t n][q k] = x[t n] @ W_ih[q k]^T + b with W_ih (plain [4K, C], row-major
    as the caller gave it) read in place as the broadcast operand A: each tile
    computed transposed, W_ih's rows of gate q, block k @ x^T's tiles (xt
    [Cb][T*Nb][bc][bn]), into a scratch tile of yt, whose epilogue adds b per
    row and stores it transposed into G's tile: one tile per task where a task
    walks its n blocks in turn (spec "Knc"), else one per (q k, n). Gates
    whose K is not whole blocks have ragged row tiles (the layer zeroes G's
    padding columns), C not whole blocks a ragged last call (xt is padded).
    hidden (T = 1): the tile also gets h0 @ W_hh[q k]^T, W_hh (plain [4K, K],
    tensor "u") read in place as A against h0^T's tiles (ht [Kb][Nb][bk][bn]),
    so that the step itself is the cell alone (cell_nest). tiles: of "w"
    (W_ih) and "u" (W_hh), those whose tiles the backward's plans read (whole
    blocks: lstm_strips.fits): the calls of the first minibatch block also copy
    the tiles of that weight they read, still in cache, into the backward's
    tiles wti [Cb][4Kb][bk][bc] (uti [Kb][4Kb][bk][bk]; copy_rows): a backward
    that follows needs them, and a copy of its own would read W from memory
    again with no kernel running. dtype: of W, xt and ht (bf16: no tiles);
    pairs: "x" (xt), "h" (ht), the tiles in VNNI pairs."""
    Nb, Kb, bk, bn, bc = g.T * g.Nb, g.Kb, g.bk, g.bn, g.bc
    G = g.layouts()[1]
    blocks = {}

    def block(m, depth, beta, lda, vnni):
        if (m, depth, beta, lda, vnni) not in blocks:
            blocks[m, depth, beta, lda, vnni] = bplan.Block(
                m, bn, depth, lda=lda, ldb=bn, ldc=bn, beta=beta, dtype=dtype, b_vnni=vnni)
        return blocks[m, depth, beta, lda, vnni]

    for phase, task, at in loops.walk():
        qk, n, c0 = at["k"], at["n"], at["c"]
        q, k = divmod(qk, Kb)
        m, row = min(bk, g.K - k * bk), q * g.K + k * bk
        ex.at(phase, task)
        yt = (qk if per_task else qk * Nb + n) * bk * bn
        ends = (bplan.bias_rows("b", q * g.Kp + k * bk),
                bplan.store_t("G", G.at(n // g.Nb, n % g.Nb, q, k), bk))
        calls = [("w", "xt", g.C, g.Cb, bc, rs, depth, rs[0] == 0)
                 for rs, depth in reduction_calls(range(c0, min(c0 + chunk, g.Cb)), g.Cb, g.C, bc)]
        if hidden and c0 + chunk >= g.Cb:  # after the last chunk of C: h0's products
            calls += [("u", "ht", g.K, Kb, bk, rs, depth, False)
                      for j0 in range(0, Kb, chunk)
                      for rs, depth in reduction_calls(range(j0, min(j0 + chunk, Kb)), Kb, g.K,
                                                       bk)]
        for i, (a, b, lda, nb, br, rs, depth, first) in enumerate(calls):
            last = i == len(calls) - 1 and (rs[-1] == nb - 1)
            copies = tuple(bplan.copy_rows(a, row * lda + r * br, lda, a + "ti",
                                           (r * 4 * Kb + qk) * bk * br, br)
                           for r in rs) if a in tiles and n == 0 else ()
            vnni = ("x" if a == "w" else "h") in pairs  # W_ih's rows against xt, W_hh's ht
            ex.gemm(block(m, depth, 0.0 if first else 1.0, lda, vnni), a,
                    [row * lda + r * br for r in rs], b, [(r * Nb + n) * br * bn for r in rs],
                    "yt", yt, ops=copies + (ends if last else ()))


def projection_t_plan(g, hidden=False, tiles=(), dtype="f32", pairs=frozenset()):
    """projection_t_nest's plan: tensors w (plain W_ih), xt, yt (scratch,
    plan.extent["yt"] floats), G, b; with hidden, u (plain W_hh) and ht too;
    wti for "w" in tiles, uti for "u" (with hidden; f32 only). w, xt, u, ht of
    dtype, xt and ht in VNNI pairs for "x" and "h" in pairs.
    Tasks are the gate blocks q k, each walking the minibatch blocks in turn
    with one scratch tile, where there are at least 4 of them a thread (yt
    then a tile per gate block, not a copy of G's size); else (q k, n) pairs."""
    per_task = 4 * g.Kb >= 4 * cpu_threads()
    spec = "Knc" if per_task else "KNc"

    def record():
        tiles_of = tuple(a for a in ("w", "u") if a in tiles and (hidden or a == "w"))
        names = ("w", "xt", "yt", "G", "b") + (("u", "ht") if hidden else ()) + \
            tuple(a + "ti" for a in tiles_of)
        if tiles_of and dtype != "f32":
            raise ValueError(f"tiles: the backward's copies are f32 only, not {dtype}")
        rec = bplan.Recorder({n: dtype if n in ("w", "xt", "u", "ht") else "f32"
                              for n in names}, spec=spec)
        chunk = g.fc_chunks[0]  # the blocked projection's (proj_chunk: lstm.toml, per kernel path)
        loops = parse_spec(spec, [Loop("k", 0, 4 * g.Kb, 1), Loop("n", 0, g.T * g.Nb, 1),
                                  Loop("c", 0, g.Cb, chunk)], where="projection_t: ")
        projection_t_nest(rec, loops, g, chunk, hidden, per_task, tiles_of, dtype, pairs)
        return rec.finish()
    return _plans.get(("proj_t", g, hidden, spec, tuple(sorted(tiles)), dtype, pairs), record)


def cell_plan(g):
    """T = 1 with h0 W_hh^T already in G (projection_t_nest's hidden): the cell
    alone on every block (n, k), as the epilogue of a call that adds 0 (a
    1-deep product of the zeros z, at least max(bn, bk) of them) to the last
    gate's tile: tensors G, c, h, z (f32)."""
    def record():
        state, G, _ = g.layouts()
        rec = bplan.Recorder(dict.fromkeys(("G", "c", "h", "z"), "f32"), spec="NK")
        blk = bplan.Block(g.bn, g.bk, 1, lda=1, ldb=g.bk, ldc=g.bk, beta=1.0)
        for phase, task, at in parse_spec("NK", [Loop("n", 0, g.Nb, 1), Loop("k", 0, g.Kb, 1)],
                                          where="cell: ").walk():
            n, k = at["n"], at["k"]
            rec.at(phase, task)
            now, nxt = state.at(0, n, k), state.at(1, n, k)
            rec.gemm(blk, "z", [0], "z", [0], "G", G.at(0, n, 3, k), ops=(
                bplan.lstm_cell("G", G.at(0, n, 0, k), G.ld("q"), "c", now, "c", nxt, "h", nxt,
                                g.bk),))
        return rec.finish()
    return _plans.get(("cell", g), record)
