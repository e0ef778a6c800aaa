"""Session 41's bug hunt in the changes of the fortieth/forty-first sessions:
brgemm.windows.copy_windows on views whose strides carry no meaning (empty
arrays, axes of size 1) or that share a buffer without sharing elements;
conv's pointwise tail on random layers and calls; primitives.nn's untracked
calls (nn_tensors._untracked) and the custom operators under torch.compile."""
import numpy as np
import pytest

import brgemm
from brgemm.windows import copy_windows


def _windows(rng, dtype):
    n, rows, cols = (int(rng.integers(1, 6)), int(rng.integers(1, 9)), int(rng.integers(1, 20)))
    print(f"windows {n} x {rows} x {cols} {np.dtype(dtype).name}")
    return rng.standard_normal((n, rows, cols)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, brgemm.bfloat16])
def test_copy_windows_empty_views(dtype):
    """Empty views (NumPy 2 gives fresh ones zero strides): nothing to copy,
    out returned as it is, not a ValueError about src's strides."""
    for shape in ((0, 3, 4), (2, 0, 4), (2, 3, 0), (0, 0, 0)):
        src, out = np.empty(shape, dtype), np.empty(shape, dtype)
        assert copy_windows(src, out) is out
        assert copy_windows(src[:, ::-1], out) is out  # (a reversed empty axis)


@pytest.mark.parametrize("dtype", [np.float32, brgemm.bfloat16])
def test_copy_windows_size_one_axes(rng, dtype):
    """An axis of size 1 is never stepped along: its stride (negative, not a
    multiple of the element size, huge) does not matter, in src or out."""
    a = _windows(rng, dtype)
    n, rows, cols = a.shape
    item = a.itemsize
    as_strided = np.lib.stride_tricks.as_strided
    one = a[:1][::-1]  # (1, rows, cols), its first stride negative
    assert np.array_equal(copy_windows(one, np.empty(one.shape, dtype)), one)
    row = as_strided(a, (n, 1, cols), (a.strides[0], 3, item))  # rows' stride 3 bytes
    assert np.array_equal(copy_windows(row, np.empty(row.shape, dtype)), a[:, :1])
    col = as_strided(a, (n, rows, 1), (a.strides[0], a.strides[1], -item))
    assert np.array_equal(copy_windows(col, np.empty(col.shape, dtype)), a[:, :, :1])
    out = np.zeros((n, 4, cols), dtype)
    dst = as_strided(out[:, 1:], (n, 1, cols), (out.strides[0], -5, item))
    copy_windows(row, dst)
    assert np.array_equal(out[:, 1:2], a[:, :1]) and not out[:, [0, 2, 3]].any()
    with pytest.raises(ValueError, match="src"):  # columns of size > 1 still contiguous
        copy_windows(as_strided(a, (n, rows, 2), (a.strides[0], a.strides[1], 0)),
                     np.empty((n, rows, 2), dtype))


@pytest.mark.parametrize("dtype", [np.float32, brgemm.bfloat16])
def test_copy_windows_interleaved_views(rng, dtype):
    """src and out in one buffer, their elements apart (each row's first and
    second half; every other window): copied, not refused as overlapping;
    views that do share an element still are."""
    a = _windows(rng, dtype)
    n, rows, cols = a.shape
    buf = np.zeros((n, rows, 2 * cols), dtype)
    buf[:, :, :cols] = a
    assert np.array_equal(copy_windows(buf[:, :, :cols], buf[:, :, cols:]), a)
    assert np.array_equal(buf[:, :, :cols], a)
    win = np.zeros((2 * n, rows, cols), dtype)
    win[::2] = a
    copy_windows(win[::2], win[1::2])
    assert np.array_equal(win[1::2], a) and np.array_equal(win[::2], a)
    if cols > 1:
        with pytest.raises(ValueError, match="out"):
            copy_windows(buf[:, :, :cols], buf[:, :, cols - 1:2 * cols - 1])


def test_copy_windows_random_views(rng):
    """Random views (windows, rows and columns cut from larger arrays, axes
    permuted as conv's tails are, offsets, read-only src, zero window
    strides in src, non-native byte order), random thread counts: NumPy's
    copy, and nothing past out's view written."""
    for _ in range(12):
        dtype = [np.float32, brgemm.bfloat16, np.dtype(">f4")][int(rng.integers(3))]
        n, rows, cols = (int(rng.integers(1, 9)), int(rng.integers(1, 40)),
                         int(rng.integers(1, 40)))
        full = rng.standard_normal((n + 2, rows + 3, cols + 5)).astype(dtype)
        i, j = int(rng.integers(3)), int(rng.integers(5))
        src = full[1:n + 1, i:i + rows, j:j + cols]
        if rng.integers(4) == 0:
            src = np.broadcast_to(src[:1], src.shape)  # every window the same memory
        src.flags.writeable = False
        flat = np.zeros((rows + 1, n, cols + 2), dtype)  # out: [rows][n][cols], a slice of it
        out = flat[1:, :, 2:].transpose(1, 0, 2)
        threads = None if rng.integers(2) else int(rng.integers(1, 5))
        print(f"{n} x {rows} x {cols} {src.dtype} src strides {src.strides} threads={threads}")
        assert copy_windows(src, out, threads=threads) is out
        assert np.array_equal(out, src)
        assert not flat[:1].astype(np.float32).any() and not flat[:, :, :2].astype(
            np.float32).any()


def _conv_reference(x, w, b=None):
    """F.conv2d in float64 and the sum of |x| |w| (+ |b|) per output."""
    import torch
    X, Wt = (torch.tensor(np.asarray(a, np.float32), dtype=torch.float64) for a in (x, w))
    B = None if b is None else torch.tensor(b, dtype=torch.float64)
    f = torch.nn.functional.conv2d
    return f(X, Wt, B).numpy(), f(X.abs(), Wt.abs(), None if B is None else B.abs()).numpy()


def _tail_layer(rng):
    """A 1x1 layer the f32 pointwise plan takes, H W no multiple of 16."""
    while True:
        H, W = int(rng.integers(3, 30)), int(rng.integers(3, 30))
        HW = H * W
        if HW > 16 and HW % 16 and 16 * -(-HW // 16) - HW <= HW // 16:
            return H, W


def _close(y, x, w, b=None):
    want, mag = _conv_reference(x, w, b)
    return y.dtype == np.float32 and y.shape == want.shape and bool(
        np.all(np.abs(y - want) <= 1e-5 * mag + 1e-30))


def test_pointwise_tail_random_layers(rng):
    """Random layers and calls of the tail's plans: 1 to 64 images, channel
    blocks of 16 or 64, K ragged, tail calls of 1 row of w to more than K,
    x a strided view or a view with an offset, a bias or not, x's copy on
    whole lines or not, varied pixel blocks and calls: the route takes the
    tail, y matches float64."""
    from primitives import conv
    for _ in range(10):
        N, (H, W), blk = int(rng.integers(1, 65)), _tail_layer(rng), int(rng.choice([16, 64]))
        C, K = blk * int(rng.integers(1, 3)), int(rng.integers(1, 100))
        cfg = {"fwd": {"bc": blk, "bk": blk, "pointwise_tail": True,
                       "pointwise_tail_rows": int(rng.choice([1, 3, 8, 64, K + 5])),
                       "pointwise_rows": bool(rng.integers(2)),
                       "pointwise_bp": int(rng.choice([16, 48, 64, 256])),
                       "pointwise_kb": int(rng.choice([1, 8, 32, 1024]))}}
        view, bias = int(rng.integers(3)), bool(rng.integers(2))
        print(f"N={N} C={C} K={K} H={H} W={W} {cfg['fwd']} view={view} bias={bias}")
        base = rng.standard_normal((N + 1) * C * H * (W + 1) + 7).astype(np.float32)
        x = (base[:N * C * H * W].reshape(N, C, H, W) if view == 0 else
             base[7:7 + N * C * H * W].reshape(N, C, H, W) if view == 1 else
             base[7:].reshape(N + 1, C, H, W + 1)[1:, :, :, 1:])
        w = rng.standard_normal((K, C, 1, 1)).astype(np.float32)
        b = rng.standard_normal(K).astype(np.float32) if bias else None
        g, path, p, _ = conv._route("fwd", (N, C, K, H, W, 1, 1), (1, 1), (0, 0), cfg, "f32",
                                    "cpu", None, x, w, has_bias=bias)
        assert path == "pointwise" and "xt" in p.extent
        assert _close(conv.forward(x, w, config=cfg, b=b), x, w, b)


def test_pointwise_tail_calls_in_turn_and_threads(rng):
    """One layer's tail plans called with other image counts in turn (the
    tail's scratch of another shape between), each result held and
    unchanged after; and from three threads at once, each its own arrays."""
    import threading

    from primitives import conv
    (H, W), C, K = _tail_layer(rng), 32, int(rng.integers(1, 70))
    cfg = {"fwd": {"pointwise_tail": True, "pointwise_tail_rows": int(rng.integers(1, 20))}}
    w = rng.standard_normal((K, C, 1, 1)).astype(np.float32)
    counts = [int(n) for n in rng.integers(1, 20, 6)]
    print(f"C={C} K={K} H={H} W={W} images {counts} {cfg['fwd']}")
    held = []
    for N in counts:
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        y = conv.forward(x, w, config=cfg)
        held.append((x, y, y.copy()))
    assert all(np.array_equal(y, kept) and _close(y, x, w) for x, y, kept in held)
    seeds, fails = [int(s) for s in rng.integers(0, 2**31, 3)], []

    def run(seed):
        r = np.random.default_rng(seed)
        for N in r.integers(1, 12, 4):
            x = r.standard_normal((int(N), C, H, W)).astype(np.float32)
            if not _close(conv.forward(x, w, config=cfg), x, w):
                fails.append((seed, int(N)))
    threads = [threading.Thread(target=run, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not fails


def test_pointwise_tail_leaves_bf16_and_backward(rng):
    """With the tail on: bf16's pointwise plan (VNNI pairs) takes no tail, and
    conv.backward's dx and dW match float64 as ever."""
    import torch

    from primitives import conv
    N, (H, W), C, K = int(rng.integers(1, 6)), _tail_layer(rng), 32, int(rng.integers(1, 50))
    print(f"N={N} C={C} K={K} H={H} W={W}")
    cfg = {"fwd": {"pointwise_tail": True, "pointwise_tail_rows": 3}}
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((N, C, H, W), (K, C, 1, 1)))
    xb, wb = x.astype(brgemm.bfloat16), w.astype(brgemm.bfloat16)
    _, path, p, _ = conv._route("fwd", (N, C, K, H, W, 1, 1), (1, 1), (0, 0), cfg, "bf16",
                                "cpu", None, xb, wb)
    assert "xt" not in p.extent
    want, mag = _conv_reference(xb, wb)
    yb = conv.forward(xb, wb, dtype="bf16", config=cfg).astype(np.float32)
    assert np.all(np.abs(yb - want) <= 2**-7 * mag + 1e-30)  # y rounded to bf16 once
    dy = rng.standard_normal((N, K, H, W)).astype(np.float32)
    dx, dw = conv.backward(dy, x, w, config=cfg)
    grads = []
    for f in (lambda a: a, np.abs):  # the gradients, then what their rounding scales with
        X, Wt = (torch.tensor(f(a), dtype=torch.float64, requires_grad=True) for a in (x, w))
        torch.nn.functional.conv2d(X, Wt).backward(torch.tensor(f(dy), dtype=torch.float64))
        grads.append((X.grad.numpy(), Wt.grad.numpy()))
    (dx64, dw64), (dx_mag, dw_mag) = grads
    assert np.all(np.abs(dx - dx64) <= 1e-5 * dx_mag + 1e-30)
    assert np.all(np.abs(dw - dw64) <= 1e-5 * dw_mag + 1e-30)


def _torch_layers(rng):
    import torch

    from primitives import nn as pnn
    C, K, N = int(rng.integers(1, 40)), int(rng.integers(1, 40)), int(rng.integers(1, 5))
    H, W, R = int(rng.integers(3, 12)), int(rng.integers(3, 12)), int(rng.choice([1, 3]))
    print(f"Linear({C}, {K}) on {N} x {C}; Conv2d({C}, {K}, {R}) on {N} x {C} x {H} x {W}")
    return ((pnn.Linear(C, K), lambda: torch.randn(N, C)),
            (pnn.Conv2d(C, K, R, padding=R // 2), lambda: torch.randn(N, C, H, W)),
            (pnn.Conv2d(C, K, R, padding=R // 2), lambda: torch.randn(C, H, W)),  # unbatched
            (pnn.Conv2d(C, K, R, padding=R // 2), lambda: torch.randn(N, C, H, W).to(
                memory_format=torch.channels_last)))


def test_untracked_results_held_and_written_in_place(rng):
    """Untracked calls (no_grad, inference_mode): a result held stays as it
    was while the module runs on other inputs (its memory is not handed out
    again), and can be written in place (relu_) without touching a later
    result."""
    import torch
    torch.manual_seed(int(rng.integers(2**31)))
    for m, make in _torch_layers(rng):
        for mode in (torch.no_grad, torch.inference_mode):
            with mode():
                x1, x2 = make(), make()
                y1 = m(x1)
                kept = y1.clone()
                y2 = m(x2)
                assert torch.equal(y1, kept) and not torch.equal(y1, y2)
                y1.relu_()
                assert torch.equal(y2, m(x2)) and torch.equal(y1, kept.relu())


def test_tracked_where_autograd_sees_the_call(rng):
    """Grad mode back on inside no_grad, frozen parameters with an input that
    requires grad, torch.func.functional_call with parameters that require
    grad, and an in-place ReLU on the output before backward: gradients
    reach what requires them and match torch's own layers'."""
    import torch
    torch.manual_seed(int(rng.integers(2**31)))
    for m, make in _torch_layers(rng)[:2]:
        ref = (torch.nn.Linear if m.weight.dim() == 2 else torch.nn.Conv2d)(
            m.in_features if m.weight.dim() == 2 else m.in_channels,
            m.out_features if m.weight.dim() == 2 else m.out_channels,
            *(() if m.weight.dim() == 2 else (m.kernel_size, 1, m.padding)))
        ref.load_state_dict(m.state_dict())
        x = make()
        with torch.no_grad():
            with torch.enable_grad():
                y = m(x)
        assert y.requires_grad
        for p in (*m.parameters(), *ref.parameters()):
            p.requires_grad_(False)
        xs = [x.clone().requires_grad_() for _ in range(2)]
        for layer, xi in zip((m, ref), xs):
            torch.relu_(layer(xi)).square().sum().backward()
        assert torch.allclose(xs[0].grad, xs[1].grad, rtol=1e-4, atol=1e-5)
        params = {k: v.detach().clone().requires_grad_() for k, v in m.named_parameters()}
        torch.func.functional_call(m, params, (x,)).sum().backward()
        assert all(p.grad is not None for p in params.values())


def test_compiled_linears_train(rng):
    """torch.compile (aot_eager) of a stack of our Linears: the custom
    operators run forward and backward with no forward-mode AD refusal, and
    loss and gradients match the same model in torch's layers."""
    import torch

    from primitives import nn as pnn
    torch.manual_seed(int(rng.integers(2**31)))
    C, H, K, N = (int(v) for v in rng.integers(1, 40, 4))
    print(f"Linear({C}, {H}), ReLU, Linear({H}, {K}) on {N} rows")
    ours = torch.nn.Sequential(pnn.Linear(C, H), torch.nn.ReLU(), pnn.Linear(H, K))
    ref = torch.nn.Sequential(torch.nn.Linear(C, H), torch.nn.ReLU(), torch.nn.Linear(H, K))
    ref.load_state_dict(ours.state_dict())
    compiled = torch.compile(ours, backend="aot_eager")
    x, t = torch.randn(N, C), torch.randn(N, K)
    for _ in range(2):
        loss = (compiled(x) - t).square().mean()
        loss.backward()
        want = (ref(x) - t).square().mean()
        want.backward()
        assert torch.allclose(loss, want, rtol=1e-4, atol=1e-6)
    for p, q in zip(ours.parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("grad", [True, False])
def test_non_tensor_input_named(grad):
    """A NumPy array or a list given to Linear or Conv2d, in grad mode and
    under no_grad alike: a TypeError naming input (the untracked check read
    requires_grad off it: AttributeError in grad mode)."""
    import torch

    from primitives import nn as pnn
    for m, x in ((pnn.Linear(4, 3), np.zeros((2, 4), np.float32)), (pnn.Linear(4, 3), [1.0] * 4),
                 (pnn.Conv2d(2, 3, 1), np.zeros((1, 2, 4, 4), np.float32))):
        with torch.set_grad_enabled(grad), pytest.raises(TypeError, match="input"):
            m(x)


def test_copy_windows_native_no_windows():
    """brgemm_cpu_copy_windows called with no windows (count 0, which its
    checks allow): BRGEMM_OK and nothing written, not a division by zero
    (SIGFPE) in its split of the windows among threads. In a subprocess:
    the crash would take pytest with it."""
    import subprocess
    import sys
    code = ("import numpy as np\nfrom brgemm.backend import cpu\n"
            "a, b = np.ones(16, np.float32), np.zeros(16, np.float32)\n"
            "p = lambda x: cpu.ffi.cast('void *', x.ctypes.data)\n"
            "for count, rows in ((0, 2), (0, 0), (2, 0)):\n"
            "    print(cpu.lib.brgemm_cpu_copy_windows(p(a), 4, 4, p(b), 4, 4, count, rows, 4, "
            "4, 2))\n"
            "print(int(b.any()))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.split() == ["0", "0", "0", "0"], run
