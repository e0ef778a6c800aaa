"""Bad-input fuzz of the public API: random dtypes, shapes, strides, views,
scalars and configs for brgemm.Kernel (three forms), brgemm.brgemm and the
fc, conv and lstm functional forms and layer classes.

Every call must return or raise ValueError / TypeError whose message starts
with the name of a real argument of what was called. Calls run in batches in
child processes that report each outcome as it happens, so a crash or a hang
names the call (seed and index) that caused it; rerun one with
BRGEMM_FUZZ_SEED=<seed> BRGEMM_FUZZ_ONLY=<index>. BRGEMM_FUZZ_CALLS sets how
many calls (default 1000, about 30 s on 2 cores)."""
import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r'''
import json, re, sys, traceback
import numpy as np
import brgemm
from primitives import conv, fc, lstm

bf16 = brgemm.bfloat16
DTYPES = [np.float32, np.float32, np.float32, bf16, np.float64, np.float16, np.int32, bool, object]
SCALARS = [1.0, 0.0, -0.5, 2, np.float64(0.25), np.float32(3), float("nan"), float("inf"), 1e39,
           -1e39, 1e-45, "x", None, 1j, True, [1.0], np.array(1.0), np.array([1.0, 2.0])]
SPECS = ["NKc", "KNc", "nkc", "Kc", "NKcc", "c|NK", "CNK", "NKC", "", "NK c", "tKN", "t|KN", "TNK",
         "Kt|N", "NKt", "t|kn", "x", "|NKc", 5, None, "n|KCn", "KCRSJ", "NKpq", "NChu", "NKPQ"]
KEYS = ["spec", "bn", "bc", "bk", "chunk", "group", "bq", "call_kb", "tiles", "zz"]
VALUES = [1, 2, 3, 16, 64, 0, -4, 2**40, "7", 1.5, True, None]


def pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def dim(rng):
    return int(pick(rng, [1, 1, 2, 3, 4, 5, 7, 8, 16, 17, 0]))


def array(rng, shape, dtype=None):
    """A random array of roughly `shape`: sometimes another dtype, a view with
    strides, reversed, transposed, non-contiguous, read-only, or not an array."""
    dtype = dtype if dtype is not None and rng.random() < 0.8 else pick(rng, DTYPES)
    shape = list(shape)
    r = rng.random()
    if r < 0.06 and shape:
        shape[int(rng.integers(len(shape)))] = dim(rng)
    elif r < 0.09:
        shape = shape + [1] if rng.random() < 0.5 else shape[1:]
    base = rng.standard_normal([max(0, s) for s in shape] or []) * pick(rng, [1, 1, 1, 1e30, 0])
    if rng.random() < 0.05 and base.size:
        base.flat[0] = pick(rng, [np.nan, np.inf, -np.inf])
    x = base.astype(dtype) if dtype is not object else base.astype(object)
    v = rng.random()
    if v < 0.08 and x.ndim:
        wide = np.zeros(x.shape[:-1] + (x.shape[-1] * 2 + 1,), x.dtype)
        wide[..., : x.shape[-1] * 2 : 2] = x
        x = wide[..., : x.shape[-1] * 2 : 2]                       # strided last axis
    elif v < 0.16 and x.ndim >= 2:
        pad = np.zeros(x.shape[:-1] + (x.shape[-1] + 3,), x.dtype)
        pad[..., 1:x.shape[-1] + 1] = x
        x = pad[..., 1:x.shape[-1] + 1]                             # row-strided view
    elif v < 0.20 and x.ndim:
        x = x[::-1]                                                 # negative strides
    elif v < 0.23 and x.ndim >= 2:
        x = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)  # transposed view
    elif v < 0.26:
        x = x.copy()
        x.flags.writeable = False
    elif v < 0.28:
        x = x.tolist()
    elif v < 0.29:
        x = None
    return x


def config(rng):
    r = rng.random()
    if r < 0.55:
        return None
    if r < 0.6:
        return pick(rng, [5, "", b"x", [1], "/nonexistent.toml", 1.5])
    out = {}
    for _ in range(int(rng.integers(1, 3))):
        table = out.setdefault(pick(rng, ["fwd", "bwd", "upd", "fwd", "xyz"]), {})
        for _ in range(int(rng.integers(1, 3))):
            key = pick(rng, KEYS)
            table[key] = pick(rng, SPECS) if key == "spec" else pick(rng, VALUES)
    return out


def dtype_arg(rng):
    return pick(rng, ["f32", "f32", "bf16", "f16", None, np.float32, 3])


def case(rng):
    """(name, allowed argument names, thunk) of one random call."""
    t = int(rng.integers(12))
    m, n, k, count = dim(rng), dim(rng), dim(rng), int(pick(rng, [0, 1, 2, 3, 5]))
    kdt = pick(rng, ["f32", "f32", "bf16"])
    ab = np.float32 if kdt == "f32" else bf16
    kw = {}
    if rng.random() < 0.3:
        kw[pick(rng, ["beta", "alpha"])] = pick(rng, SCALARS)
    if rng.random() < 0.1:
        kw["dtype"] = dtype_arg(rng)
    if rng.random() < 0.05:
        kw["backend"] = pick(rng, ["cpu", "gpu", None, 1])
    kernel_args = {"m", "n", "k", "dtype", "beta", "alpha", "backend", "lda", "ldb"}
    if t == 0:
        A, B, C = array(rng, (count, m, k), ab), array(rng, (count, k, n), ab), array(rng, (m, n), np.float32)
        if rng.random() < 0.15 and isinstance(B, np.ndarray) and kdt == "bf16":
            try:
                B = brgemm.Kernel(m, n, k, dtype="bf16").pack_b(B)
                if rng.random() < 0.5:
                    B.data = B.data[:, : max(1, B.data.shape[1] - 1)] if rng.random() < 0.5 else B.data.astype(np.float32)
            except (ValueError, TypeError):
                pass
        return "Kernel.__call__", kernel_args | {"A", "B", "C"}, \
            lambda: brgemm.Kernel(m, n, k, **{"dtype": kdt, **kw})(A, B, C)
    if t == 1:
        As = [array(rng, (m, k), ab) for _ in range(count)]
        Bs = [array(rng, (k, n), ab) for _ in range(count if rng.random() < 0.9 else count + 1)]
        C = array(rng, (m, n), np.float32)
        seqs = (As, Bs) if rng.random() < 0.9 else (np.stack(As) if As and all(isinstance(a, np.ndarray) for a in As) else 5, Bs)
        return "Kernel.addr", kernel_args | {"As", "Bs", "C"}, \
            lambda: brgemm.Kernel(m, n, k, **{"dtype": kdt, **kw}).addr(*seqs, C)
    if t == 2:
        lda = k + int(pick(rng, [0, 0, 1, 5, -1]))
        A, B = array(rng, (count * m * max(lda, 1) + 4,), ab), array(rng, (count * k * n + 3,), ab)
        ao = [int(v) for v in rng.integers(-2, max(1, len(A) if isinstance(A, (list, np.ndarray)) else 1), count)]
        bo = [int(v) for v in rng.integers(0, 5, count if rng.random() < 0.9 else count + 1)]
        if rng.random() < 0.1:
            ao = pick(rng, [[0.5] * count, "0", np.array([[0]]), [True] * count, [2**62] * count])
        C = array(rng, (m, n), np.float32)
        return "Kernel.offs", kernel_args | {"A", "B", "a_offsets", "b_offsets", "C"}, \
            lambda: brgemm.Kernel(m, n, k, lda=lda, **{"dtype": kdt, **kw}).offs(A, B, ao, bo, C)
    if t == 3:
        A, B, C = array(rng, (count, m, k), ab), array(rng, (count, k, n), ab), array(rng, (m, n), np.float32)
        kw.pop("dtype", None)
        return "brgemm", {"A", "B", "C", "beta", "alpha", "backend"}, lambda: brgemm.brgemm(A, B, C, **kw)
    N, Cc, K = dim(rng) + 1, dim(rng) + 1, dim(rng) + 1
    common = {"dtype", "backend", "config"}
    pkw = {"config": config(rng)}
    if rng.random() < 0.15:
        pkw["dtype"] = dtype_arg(rng)
    pdt = np.float32 if pkw.get("dtype", "f32") != "bf16" else pick(rng, [np.float32, bf16])
    if t == 4:
        x, w = array(rng, (N, Cc), pdt), array(rng, (K, Cc), pdt)
        b = array(rng, (K,), pdt) if rng.random() < 0.5 else None
        return "fc.forward", common | {"x", "w", "b"}, lambda: fc.forward(x, w, b, **pkw)
    if t == 5:
        dy, x, w = array(rng, (N, K), pdt), array(rng, (N, Cc), pdt), array(rng, (K, Cc), pdt)
        return "fc.backward", common | {"dy", "x", "w"}, lambda: fc.backward(dy, x, w, **pkw)
    H, W, R, S = dim(rng) + 2, dim(rng) + 2, pick(rng, [1, 1, 3, 2, 5]), pick(rng, [1, 3, 1, 2])
    stride = pick(rng, [1, 1, 2, (1, 2), 3, 0, -1, (1,), "2", 2**29, (2, 2, 2), 1.5])  # noqa
    padding = pick(rng, [0, 0, 1, (0, 1), 2, -1, 2**22, (1,), None])
    if t in (6, 7):
        x, w = array(rng, (N, Cc, H, W), pdt), array(rng, (K, Cc, R, S), pdt)
        if t == 6:
            return "conv.forward", common | {"x", "w", "stride", "padding"}, \
                lambda: conv.forward(x, w, stride, padding, **pkw)
        pad = min(padding, 3) if isinstance(padding, int) else 0   # a small dy even for huge ones
        step = stride if isinstance(stride, int) and stride > 0 else 1
        P, Q = (H + 2 * pad - R) // step + 1, (W + 2 * pad - S) // step + 1
        dy = array(rng, (N, K, max(P, 1), max(Q, 1)), pdt)
        return "conv.backward", common | {"dy", "x", "w", "stride", "padding"}, \
            lambda: conv.backward(dy, x, w, stride, padding, **pkw)
    T = dim(rng) + 1
    if t in (8, 9):
        x = array(rng, (T, N, Cc), pdt)
        h0, c0 = (array(rng, (N, K), pdt) if rng.random() < 0.6 else None for _ in range(2))
        wi, wh, b = array(rng, (4 * K, Cc), pdt), array(rng, (4 * K, K), pdt), array(rng, (4 * K,), pdt)
        if t == 8:
            return "lstm.forward", common | {"x", "h0", "c0", "w_ih", "w_hh", "b"}, \
                lambda: lstm.forward(x, h0, c0, wi, wh, b, **pkw)
        dy = array(rng, (T, N, K), pdt)
        dh, dc = (array(rng, (N, K), pdt) if rng.random() < 0.5 else None for _ in range(2))
        return "lstm.backward", common | {"dy", "dhT", "dcT", "x", "h0", "c0", "w_ih", "w_hh", "b"}, \
            lambda: lstm.backward(dy, dh, dc, x, h0, c0, wi, wh, b, **pkw)
    layer_kw = dict(pkw)
    ctor_c, ctor_k = pick(rng, [Cc, Cc, Cc, 0, -1, 2.5, "4", None]), pick(rng, [K, K, K, 0, True])
    if t == 10:
        which = int(rng.integers(3))
        if which == 0:
            blocks = pick(rng, [None, None, (1, 1, 1), (4, 16, 16), (0, 1, 1), ("a", 1, 1), (2, 2), 7])
            act = pick(rng, [None, "relu", "tanh", "sigmoid", "none", "gelu", 3])
            x, dy = array(rng, (N, Cc), pdt), array(rng, (N, K), pdt)

            def run():
                layer = fc.Linear(ctor_c, ctor_k, activation=act, blocks=blocks, **layer_kw)
                layer.forward(x)
                if rng.random() < 0.8:
                    layer.backward(dy)
                    layer.step(pick(rng, [0.1, 0.0]))
            return "fc.Linear", common | {"C", "K", "bias", "activation", "blocks", "rng", "x", "dy",
                                          "lr"}, run
        if which == 1:
            sizes = pick(rng, [[Cc, K], [Cc, 8, K], [Cc], [], 5, [Cc, 0], [Cc, "8"], None])
            blocks = pick(rng, [(16, 16, 16), (4, 16, 16), (16, 8, 16), (0, 1, 1), None])
            x, dy = array(rng, (N, Cc), pdt), array(rng, (N, K), pdt)

            def run():
                mlp = fc.MLP(sizes, blocks=blocks, **layer_kw)
                mlp.forward(x)
                mlp.backward(dy)
            return "fc.MLP", common | {"sizes", "activation", "last_activation", "bias", "blocks",
                                       "rng", "x", "dy", "lr"}, run
        ks = pick(rng, [R, (R, S), 0, (1, 2, 3), "3", None])
        x = array(rng, (N, Cc, H, W), pdt)

        def run():
            layer = conv.Conv2d(ctor_c, ctor_k, ks, stride=stride, padding=padding, **layer_kw)
            y = layer.forward(x)
            layer.backward(array(rng, y.shape, pdt) if rng.random() < 0.8 else array(rng, (1, 2), pdt))
        return "conv.Conv2d", common | {"C", "K", "kernel_size", "stride", "padding", "rng", "x",
                                        "dy", "lr"}, run
    x = array(rng, (T, N, Cc), pdt)
    h0 = array(rng, (N, K), pdt) if rng.random() < 0.5 else None

    def run():
        layer = lstm.LSTM(ctor_c, ctor_k, **layer_kw)
        y, _ = layer.forward(x, h0)
        layer.backward(array(rng, y.shape if rng.random() < 0.8 else (T, N + 1, K), pdt))
        _ = layer.grad_w_ih, layer.grad_b
    return "lstm.LSTM", common | {"C", "K", "rng", "x", "h0", "c0", "dy", "dhT", "dcT"}, run


def main(seed, start, count, only):
    for i in range(start, start + count):
        if only is not None and i != only:
            continue
        rng = np.random.default_rng([seed, i])
        try:
            name, allowed, thunk = case(rng)
        except Exception as e:  # the generator itself: never the library's fault
            print(json.dumps([i, "skip", "", f"generator: {type(e).__name__}: {e}"]), flush=True)
            continue
        print(json.dumps([i, "start", name, ""]), flush=True)
        try:
            thunk()
            out = [i, "ok", name, ""]
        except Exception as e:
            msg = str(e)
            word = re.match(r"[A-Za-z_][A-Za-z0-9_]*", msg)
            word = word.group(0) if word else ""
            named = isinstance(e, (ValueError, TypeError)) and word in allowed
            out = [i, "named" if named else "unnamed", name,
                   f"{type(e).__name__}: {msg[:300]}" + ("" if named else
                   "\n" + "".join(traceback.format_exc(limit=-4)))]
        print(json.dumps(out), flush=True)


main(*map(int, sys.argv[1:4]), int(sys.argv[4]) if len(sys.argv) > 4 else None)
'''


def run_batch(seed, start, count, only=None, timeout=240):
    """Outcomes of calls [start, start + count) in one child; a child that dies
    or hangs is reported as the crash of the call it had started."""
    args = [sys.executable, "-c", CHILD, str(seed), str(start), str(count)]
    if only is not None:
        args.append(str(only))
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    try:
        p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
        out, rc, hung = p.stdout, p.returncode, False
    except subprocess.TimeoutExpired as e:
        out, rc, hung = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), None, True
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("[")]
    results = [r for r in rows if r[1] != "start"]
    started = [r for r in rows if r[1] == "start"]
    done = {r[0] for r in results}
    pending = [r for r in started if r[0] not in done]
    if rc != 0 or hung:
        where = pending[-1] if pending else [start, "start", "?", ""]
        why = "hang (timeout)" if hung else f"exit code {rc}"
        stderr = "" if hung else p.stderr[-2000:]
        results.append([where[0], "crash", where[2], f"{why}\n{stderr}"])
    return results


def test_api_fuzz():
    seed = int(os.environ.get("BRGEMM_FUZZ_SEED", np.random.SeedSequence().entropy % 2**32))
    calls = int(os.environ.get("BRGEMM_FUZZ_CALLS", "1000"))
    only = os.environ.get("BRGEMM_FUZZ_ONLY")
    print(f"seed={seed} calls={calls} (rerun one: BRGEMM_FUZZ_SEED={seed} BRGEMM_FUZZ_ONLY=<index>)")
    if only is not None:
        batches = [(int(only), 1)]
    else:
        size = 100
        batches = [(s, min(size, calls - s)) for s in range(0, calls, size)]
    results = []
    with ThreadPoolExecutor(2) as pool:
        for rows in pool.map(lambda b: run_batch(seed, *b), batches):
            results += rows
    # a crash ends a batch: the calls after it run in a batch of their own
    for row in [r for r in results if r[1] == "crash"]:
        start, count = next((s, c) for s, c in batches if s <= row[0] < s + c)
        if row[0] + 1 < start + count:
            results += run_batch(seed, row[0] + 1, start + count - row[0] - 1)
    counts = {}
    for r in results:
        counts[r[1]] = counts.get(r[1], 0) + 1
    print("outcomes:", counts)
    bad = [r for r in results if r[1] in ("crash", "unnamed")]
    for r in bad[:10]:
        print(f"--- call {r[0]} ({r[2]}): {r[1]}\n{r[3]}")
    assert not bad, f"{len(bad)} calls crashed or raised unnamed errors (seed={seed})"
    assert counts.get("ok", 0) > calls // 20  # the fuzz still reaches working calls
