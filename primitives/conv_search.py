"""conv's search space for the tuner (brgemm.tuning.Search, primitives.tune):
the configs of one pass of one layer it may try, how it ranks them before
timing and how it times one (the pass's blocked plan alone)."""
import itertools

import numpy as np

from brgemm.arrays import aligned_empty
from primitives._args import fits
from primitives._config import settings
from primitives.conv_layouts import block_w, block_x, block_y
from primitives.conv_plans import SCHEMA, geometry, plan, update_inputs, update_output


def search(pass_, shape, threads=None):
    """Configs the tuner may try for one pass of this layer (brgemm.tuning.Search).
    shape: N, C, K, H, W, R, S, sh, sw, ph, pw. fwd also tunes the blocking, which
    all three passes share; bwd and upd tune their loop order (upd: its tiles), fwd
    and bwd the pixel blocks that share each call's weights (w_reuse, where a task
    has several), and each pass the bytes its kernel calls read (call_kb)."""
    # imported here, not with conv: the tuner's module (and the statistics it
    # pulls in) would add to every `import primitives.conv`
    from brgemm.tuning import Search, best_time
    if pass_ not in SCHEMA:
        raise ValueError(f"pass: expected fwd, bwd or upd, got {pass_!r}")
    s = shape
    for name in ("N", "C", "K", "H", "W", "R", "S", "sh", "sw", "ph", "pw"):
        if s[name] < (0 if name in ("ph", "pw") else 1):
            raise ValueError(f"shape: {name} = {s[name]} is out of range")
    dims = (s["N"], s["C"], s["K"], s["H"], s["W"], s["R"], s["S"])
    stride, padding = (s["sh"], s["sw"]), (s["ph"], s["pw"])
    if s["R"] > s["H"] + 2 * s["ph"] or s["S"] > s["W"] + 2 * s["pw"]:
        raise ValueError(f"shape: the {s['R']}x{s['S']} kernel is larger than the padded "
                         f"{s['H'] + 2 * s['ph']}x{s['W'] + 2 * s['pw']} input")
    fits(4 * 4 * s["N"] * max(s["C"], s["K"], 16) * (s["H"] + 2 * s["ph"]) * (s["W"] + 2 * s["pw"])
         + 4 * s["K"] * s["C"] * s["R"] * s["S"], "shape", "this layer's tensors and their copies")
    Q = (s["W"] + 2 * s["pw"] - s["S"]) // s["sw"] + 1
    if pass_ == "fwd":
        cands = [dict(spec=sp, bc=bc, bk=bk, bq=bq, call_kb=kb, w_reuse=r) for sp, bc, bk, bq, kb, r
                 in itertools.product(("NKpq", "KNpq", "NKPq", "nKPq"), (32, 64), (32, 64),
                                      (7, 14, 28, 56), (32, 128), (1, 8))
                 if bq <= max(Q, 7) and (r == 1 or sp.endswith("pq"))]  # w_reuse: rows in a task
    elif pass_ == "bwd":
        cands = [dict(spec=sp, call_kb=kb, w_reuse=r) for sp, kb, r in itertools.product(
            ("NChu", "CNhu", "NCHu", "nCHu"), (16, 32, 64, 128), (1, 8)) if r == 1 or sp[2] == "h"]
    else:
        cands = [dict(spec=sp, tiles=t, call_kb=kb)
                 for sp, t, kb in itertools.product(("KCRSJ", "CKRSJ"), (4, 8, 16, 32),
                                                    (32, 64, 128, 256))]
    rng = np.random.default_rng()
    x = rng.standard_normal((s["N"], s["C"], s["H"], s["W"])).astype(np.float32)
    w = rng.standard_normal((s["K"], s["C"], s["R"], s["S"])).astype(np.float32)

    def cost(cfg):
        # a model of the obvious: wide channel blocks and long pixel rows per call run
        # best; deeper structure is left to the timings
        full = {**settings("conv", "fwd", shape, SCHEMA["fwd"]), **cfg} if pass_ == "fwd" else \
            settings("conv", "fwd", shape, SCHEMA["fwd"])
        return 1.0 / (min(full["bk"], 64) * min(full["bc"], 64) * min(full["bq"], Q))

    def time(cfg, threads_):
        # the other passes as configured (BRGEMM_CONFIG included): bwd and upd are
        # tuned on the blocking that a tuned fwd chose
        others = {p: settings("conv", p, shape, SCHEMA[p]) for p in SCHEMA if p != pass_}
        g = geometry(*dims, stride, padding, config={**others, pass_: cfg})
        dy = rng.standard_normal((g.N, g.K, g.P, g.Q)).astype(np.float32)
        t = {"fwd": dict(x=block_x(x, g, "f32"), w=block_w(w, g, "f32"),
                         y=aligned_empty((g.N, g.Kb, g.P, g.Q, g.bk), np.float32)),
             "bwd": dict(dyp=block_y(dy, g, "f32", bordered=True),
                         wt=block_w(w, g, "f32", transposed=True),
                         dx=aligned_empty((g.N, g.Cb, g.Hp, g.Wp, g.bc), np.float32)),
             "upd": dict(dw=update_output(g), **update_inputs(x, dy, g, "f32"))}[pass_]
        p = plan(g, pass_, "f32")
        return best_time(lambda: p.run(threads=threads_, **t))

    return Search("conv", pass_, dict(shape), settings("conv", pass_, shape, SCHEMA[pass_]),
                  cands, cost, time)
