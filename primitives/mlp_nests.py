"""The fused MLP's loop nests (forward; backward-data with the weight
gradients) and where every tensor region they name lives (Places). The
formulas and the spec: primitives/mlp.py's docstring."""
from brgemm import plan as bplan
from brgemm.loopspec import Loop, parse_spec
from brgemm.vnni import takes_vnni_b


SPEC = "s|Nnl"     # segments one after another over the whole batch, then tasks, tiles, layers


_ACT_OPS = {"relu": bplan.relu, "sigmoid": bplan.sigmoid, "tanh": bplan.tanh}


class Places:
    """Offsets of every tensor region the nests name: a layer's output (or its
    gradient), by tile, in a persistent buffer or the task's scratch slot."""

    def __init__(self, g, train, out16=False):
        self.g, self.train = g, train
        # out16: the pass's result (y forward, dx backward) goes out in bf16, written
        # by the last call's epilogue from an f32 C in the scratch slot (no f32 copy
        # in memory), except a y that backward reads for the last activation's act'
        self.out16 = out16
        self.y32 = not out16 or (train and g.acts[-1] is not None)
        L, sizes, Nb, T = g.L, g.sizes, g.Nb, g.tasks
        self.bf16 = g.dtype == "bf16"
        self.stored = [l for l in range(L - 1) if train or g.boundary(l)]
        self.bounds = [l for l in range(L - 1) if g.boundary(l)]
        rows = lambda l: g.N * sizes[l + 1]  # noqa: E731 (an [N, out_l] activation)
        self.h_off, h = self._regions(self.stored, rows)
        self.g_off, gs = self._regions(self.bounds, rows)
        self.w_off, w = self._regions(range(L), lambda l: sizes[l] * sizes[l + 1])
        self.b_off, b = self._regions(range(L), lambda l: sizes[l + 1])
        self.dzt_off, dzt = self._regions(range(L), lambda l: Nb * g.tile * sizes[l + 1])
        self.slot = 2 * g.tile * g.width       # a task's scratch: two activations
        self.dslot = 2 * g.tile * g.fan        # ... and two gradients in backward
        # layers whose weights the kernel reads as VNNI pairs in place (bf16 on AMX):
        # packed once per call here instead of once per kernel call
        self.vnni_fwd = frozenset(l for l in range(L) if takes_vnni_b(sizes[l], g.dtype))
        self.vnni_bwd = frozenset(l for l in range(L) if takes_vnni_b(sizes[l + 1], g.dtype))
        self.totals = dict(h=h, g=gs, w=w, b=b, dzt=dzt, s=T * self.slot, d=T * self.dslot)

    @staticmethod
    def _regions(layers, size):
        """(offset of each layer's region, total size) of regions laid end to end."""
        out, at = {}, 0
        for l in layers:
            out[l], at = at, at + size(l)
        return out, at

    def act_in(self, l, n, slot):
        """Layer l's input tile as an A or B operand (dtype of the GEMMs)."""
        g = self.g
        if l == 0:
            return "x", n * g.tile * g.sizes[0], g.sizes[0]
        width = g.sizes[l]
        if l - 1 in self.h_off:
            return ("h16" if self.bf16 else "h"), self.h_off[l - 1] + n * g.tile * width, width
        return ("s16" if self.bf16 else "s"), slot * self.slot + ((l - 1) % 2) * g.tile * g.width, \
            width

    def act_out(self, l, n, slot):
        """(C place (f32), bf16 copy place or None) of layer l's output tile."""
        g = self.g
        width = g.sizes[l + 1]
        if l == g.L - 1:
            y16 = ("y16", n * g.tile * width, width) if self.out16 else None
            if self.y32:
                return ("y", n * g.tile * width, width), y16
            return ("s", slot * self.slot + (l % 2) * g.tile * g.width, width), y16
        if l in self.h_off:
            at = self.h_off[l] + n * g.tile * width
            if not self.bf16:
                return ("h", at, width), None
            # bf16: only the bf16 copy is kept (backward's act' reads it too)
            return ("s", slot * self.slot + (l % 2) * g.tile * g.width, width), ("h16", at, width)
        at = slot * self.slot + (l % 2) * g.tile * g.width
        return ("s", at, width), (("s16", at, width) if self.bf16 else None)

    def dz(self, l, n, slot):
        """Where dz_l (the gradient at layer l's pre-activation) is, row-major, as
        the A operand of layer l's backward-data GEMM."""
        g = self.g
        width = g.sizes[l + 1]
        if l == g.L - 1:
            return "dz", n * g.tile * width, width
        if l in self.g_off:
            return ("g16" if self.bf16 else "g"), self.g_off[l] + n * g.tile * width, width
        return ("d16" if self.bf16 else "d"), slot * self.dslot + (l % 2) * g.tile * g.fan, width

    def dz_c(self, l, n, slot):
        """(C place (f32), bf16 copy place or None) of dz_l, made by layer l+1's
        backward-data GEMM and its epilogue."""
        g = self.g
        width = g.sizes[l + 1]
        if l in self.g_off and not self.bf16:
            return ("g", self.g_off[l] + n * g.tile * width, width), None
        at = slot * self.dslot + (l % 2) * g.tile * g.fan
        copy = None
        if self.bf16:
            copy = ("g16", self.g_off[l] + n * g.tile * width, width) if l in self.g_off else \
                ("d16", at, width)
        return ("d", at, width), copy

    def dx(self, n, slot):
        """(C place (f32), bf16 copy place or None) of dx's tile n (layer 0's
        backward-data GEMM): dx itself, or with out16 the scratch slot (where
        dz_0, its A, is not) and dx16."""
        g = self.g
        width = g.sizes[0]
        if not self.out16:
            return ("dx", n * g.tile * width, width), None
        return ("d", slot * self.dslot + g.tile * g.fan, width), ("dx16", n * g.tile * width, width)

    def dzt(self, l, n):
        """dz_l^T of tile n: [out_l][tile], row stride tile."""
        return self.dzt_off[l] + n * self.g.sizes[l + 1] * self.g.tile


def tensors(g, pass_, train, out16=False):
    """name -> dtype of the buffers the pass's plan reads and writes."""
    ab = g.dtype
    pl = Places(g, train, out16)
    if pass_ == "fwd":
        t = {"x": ab, "w": ab}
        if pl.y32:
            t["y"] = "f32"
        if out16:
            t["y16"] = "bf16"
        if g.has_bias:
            t["b"] = "f32"
        scratch = len(pl.stored) < g.L - 1 or not pl.y32
        if pl.stored:
            t["h16" if pl.bf16 else "h"] = ab
        if scratch or (pl.bf16 and pl.stored):
            t["s"] = "f32"
        if scratch and pl.bf16:
            t["s16"] = "bf16"
        return t
    t = {"x": ab, "wt": ab, "dz": ab, "dzt": ab, "dwp": "f32"}
    t.update(dx16="bf16", d="f32") if out16 else t.update(dx="f32")
    if g.has_bias:
        t.update(ones=ab, dbp="f32")
    if g.L > 1:
        t["h16" if pl.bf16 else "h"] = ab
        t["d"] = "f32"
        if pl.bf16:
            t["d16"] = "bf16"
        if pl.bounds:
            t["g16" if pl.bf16 else "g"] = ab
    return t


def _loops(g):
    return parse_spec(SPEC, [Loop("n", 0, g.Nb, 1, blocks=(g.per_task,)),
                             Loop("s", 0, -(-g.L // g.depth), 1), Loop("l", 0, g.depth, 1)])


# ---------------------------------------------------------------- the loop nests

class _Blocks(dict):
    """Kernel shapes by their arguments, made once."""

    def __call__(self, *args, **kw):
        key = (args, tuple(sorted(kw.items())))
        if key not in self:
            self[key] = bplan.Block(*args, **kw)
        return self[key]


def forward_nest(ex, loops, g, train, out16=False):
    """h_{l+1}[n] = act(h_l[n] @ W_l^T + b_l), all layers of a segment per tile."""
    pl, blk = Places(g, train, out16), _Blocks()
    for phase, task, at in loops.walk():
        n, l = at["n"], at["s"] * g.depth + at["l"]
        if l >= g.L:
            continue
        slot = task[0] // g.per_task
        a, a_off, lda = pl.act_in(l, n, slot)
        (c, c_off, ldc), copy = pl.act_out(l, n, slot)
        ops = (bplan.bias("b", pl.b_off[l]),) if g.has_bias else ()
        if g.acts[l] is not None:
            ops += (_ACT_OPS[g.acts[l]](),)
        if copy is not None:
            ops += (bplan.store_bf16(copy[0], copy[1], copy[2]),)
        ex.at(phase, task)
        ex.gemm(blk(g.rows(n), g.sizes[l + 1], g.sizes[l], lda=lda, ldb=g.sizes[l + 1], ldc=ldc,
                    dtype=g.dtype, beta=0.0, b_vnni=l in pl.vnni_fwd),
                a, [a_off], "w", [pl.w_off[l]], c, c_off, ops=ops)


def backward_nest(ex, loops, g, out16=False):
    """Per tile, layers descending: dz_{l-1} = (dz_l @ W_l) * act'(h_l) (with its
    transpose stored for the weight gradients), dx at layer 0; after every
    `group` tiles of a task, dW_l and db_l of those tiles as batch-reduce calls."""
    pl, blk = Places(g, True, out16), _Blocks()
    bf16 = g.dtype == "bf16"
    segments = -(-g.L // g.depth)
    for phase, task, at in loops.walk():
        s, n = segments - 1 - at["s"], at["n"]
        l = s * g.depth + (g.depth - 1 - at["l"])
        if l >= g.L:
            continue
        slot, first = task[0] // g.per_task, task[0]
        last = min(first + g.per_task, g.Nb) - 1
        ex.at(phase, task)
        a, a_off, lda = pl.dz(l, n, slot)
        out, inp = g.sizes[l + 1], g.sizes[l]
        if l == 0:
            (c, c_off, ldc), copy = pl.dx(n, slot)
            ex.gemm(blk(g.rows(n), inp, out, lda=lda, ldb=inp, ldc=ldc, dtype=g.dtype, beta=0.0,
                        b_vnni=l in pl.vnni_bwd),
                    a, [a_off], "wt", [pl.w_off[l]], c, c_off,
                    ops=(bplan.store_bf16(*copy),) if copy else ())
        else:
            (c, c_off, ldc), copy = pl.dz_c(l - 1, n, slot)
            h_at = pl.h_off[l - 1] + n * g.tile * inp
            ops = (bplan.act_grad(g.acts[l - 1], "h16" if bf16 else "h", h_at, inp, bf16=bf16),) \
                if g.acts[l - 1] else ()
            ops += (bplan.store_t("dzt", pl.dzt(l - 1, n), g.tile, bf16=bf16),)
            if copy is not None:
                ops += (bplan.store_bf16(*copy),)
            if g.has_bias:
                ops += (bplan.col_sum("dbp", slot * pl.totals["b"] + pl.b_off[l - 1]),)
            ex.gemm(blk(g.rows(n), inp, out, lda=lda, ldb=inp, ldc=ldc, dtype=g.dtype, beta=0.0,
                        b_vnni=l in pl.vnni_bwd),
                    a, [a_off], "wt", [pl.w_off[l]], c, c_off, ops=ops)
        if (n - first) % g.group == g.group - 1 or n == last:
            _weight_grads(ex, g, pl, blk, l, n - (n - first) % g.group, n + 1, first, slot)


def _weight_grads(ex, g, pl, blk, l, n0, n1, first, slot):
    """dW_l (+)= sum_{n0 <= n < n1} dz_l[n]^T @ h_l[n] into the task's partial sum;
    db_l of the last layer likewise against a column of ones (the others' come from
    the epilogues that make dz_l: col_sum). The ragged last tile gets its own call."""
    out, inp = g.sizes[l + 1], g.sizes[l]
    full = [n for n in range(n0, n1) if g.rows(n) == g.tile]
    calls = [(full, g.tile)] if full else []
    if n1 - 1 not in full:
        calls.append(([n1 - 1], g.rows(n1 - 1)))
    for tiles, k in calls:
        beta = 0.0 if tiles[0] == first else 1.0
        src = [pl.act_in(l, n, slot) for n in tiles]
        ex.gemm(blk(out, inp, k, lda=g.tile, ldb=inp, ldc=inp, dtype=g.dtype, beta=beta),
                "dzt", [pl.dzt(l, n) for n in tiles], src[0][0], [s[1] for s in src],
                "dwp", slot * pl.totals["w"] + pl.w_off[l])
        if g.has_bias and l == g.L - 1:
            ex.gemm(blk(out, 1, k, lda=g.tile, ldb=1, ldc=1, dtype=g.dtype, beta=beta),
                    "dzt", [pl.dzt(l, n) for n in tiles], "ones", [0] * len(tiles),
                    "dbp", slot * pl.totals["b"] + pl.b_off[l])
