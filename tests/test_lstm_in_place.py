"""The LSTM functional forms that read W_ih (and with one step W_hh) in place
(lstm_strips.reads_in_place): every path, forced, against torch.nn.LSTM in
float64 on random shapes with remainders (minibatch, input and hidden sizes
not whole blocks), equal to each other, and the rule's choice on the
benchmark shapes."""
import numpy as np
import pytest

from primitives import lstm
from primitives.lstm_strips import fits, reads_in_place
from tests.test_lstm import check, make, reference

CFG = {"fwd": {"bn": 16, "bc": 32, "bk": 16}}  # several blocks, ragged edges, on small shapes


@pytest.mark.parametrize("case", range(6))
def test_in_place_matches_torch_and_the_blocked_path(rng, monkeypatch, case):
    T, N, C, K = (int(rng.integers(1, 4)), int(rng.integers(1, 40)), int(rng.integers(1, 100)),
                  int(rng.integers(1, 50)))
    if case < 2:  # whole blocks everywhere: the weights' tiles in one copy for backward
        N, C, K = 32, 64, 32
    if case % 2 == 0:  # one step: W_hh read in place too
        T = 1
    print(f"T={T} N={N} C={C} K={K}")
    a, d = make(rng, T, N, C, K, np.float32)
    fwd, bwd = reference(a, d)
    got = {}
    ways = [frozenset(), frozenset({"w_ih"})] + [frozenset({"w_ih", "w_hh"})] * (T == 1)
    for in_place in ways:
        monkeypatch.setattr(lstm, "reads_in_place", lambda *args, v=in_place: v)
        saved = lstm.Saved()
        out = lstm.forward(**a, config=CFG, saved=saved)
        whole = fits(saved.layer.g, C, saved.layer.g.bc)
        for w in in_place:  # whole blocks: the forward made the backward's tiles of W
            assert (w + "_tiles" in saved.layer._blocked) == whole
        grads = lstm.backward(**d, **a, config=CFG, saved=saved)
        fresh = lstm.backward(**d, **a, config=CFG)  # the forward run again inside
        assert (saved.layer.wx is None) == ("w_ih" in in_place)
        assert (saved.layer.wh is None) == ("w_hh" in in_place)
        y, (hT, cT) = out
        check(["y", "hT", "cT"], (y, hT, cT), fwd, 1e-5)  # f32: sums of C + K + 1 terms
        check(["dx", "dh0", "dc0", "dw_ih", "dw_hh", "db"], grads, bwd, 1e-5)
        for g, f in zip(grads, fresh):
            np.testing.assert_array_equal(g, f)
        got[in_place] = (y, hT, cT) + tuple(grads)
    for way in ways[1:]:
        for blocked, in_place in zip(got[ways[0]], got[way]):
            # same products, the sums in another order at most
            np.testing.assert_allclose(in_place, blocked, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", range(3))
def test_in_place_projection_either_task_split(rng, monkeypatch, case):
    """projection_t_plan's two task splits (gate blocks walking the minibatch
    with one scratch tile each, or one task per tile: chosen by the thread
    count) give the same results, and torch's."""
    from primitives import lstm_plans
    T, N, C, K = (int(rng.integers(1, 4)), int(rng.integers(1, 40)), int(rng.integers(1, 100)),
                  int(rng.integers(1, 50)))
    print(f"T={T} N={N} C={C} K={K}")
    a, d = make(rng, T, N, C, K, np.float32)
    fwd, bwd = reference(a, d)
    got = []
    for threads in (1, 10 ** 6):  # every split per task, then none
        monkeypatch.setattr(lstm_plans, "cpu_threads", lambda t=threads: t)
        y, (hT, cT) = lstm.forward(**a, config=CFG)
        check(["y", "hT", "cT"], (y, hT, cT), fwd, 1e-5)
        got.append((y.copy(), hT.copy(), cT.copy()))
    for one, other in zip(*got):
        np.testing.assert_array_equal(one, other)


def test_the_rule_reads_w_ih_in_place_and_w_hh_for_one_step_of_a_small_batch():
    w = np.zeros((1, 1), np.float32)  # only the dtype and layout matter here
    x = np.zeros((1, 1, 1), np.float32)
    both, ih = {"w_ih", "w_hh"}, {"w_ih"}
    for (T, N, C, K), want in (((1, 128, 2048, 1024), both), ((10, 64, 512, 512), ih),
                               ((50, 64, 1024, 1024), ih), ((10, 64, 2048, 2048), ih),
                               ((1, 64, 4096, 64), ih), ((1, 4096, 64, 64), ih)):
        g = lstm.geometry(T, N, C, K)
        assert reads_in_place(g, "f32", "cpu", x, w, w, None) == want, (T, N, C, K)
        assert not reads_in_place(g, "bf16", "cpu", x, w, w, None)  # f32 arrays: rounded first
        assert not reads_in_place(g, "f32", "cpu", x, w, w, object())  # kept blocked wins
        assert not reads_in_place(g, "f32", "cpu", x, np.zeros((2, 2), np.float32).T, w, None)


@pytest.mark.parametrize("case", range(4))
def test_in_place_bf16(rng, monkeypatch, case):
    """bf16 x and weights (nothing to round): W_ih (and with one step W_hh) read
    in place where the blocks are whole, x^T's and h0^T's tiles in VNNI pairs
    where the kernel reads them so, the backward's tiles made from W itself;
    against torch.nn.LSTM in float64 (bf16 operands: 1e-2 of the scale, as
    test_lstm's bf16 cases), every way forced, and the rule's choice."""
    import brgemm
    T, N = (1, 2)[case % 2], int(rng.integers(1, 40))
    C, K = 32 * int(rng.integers(1, 4)), 16 * int(rng.integers(1, 4))
    print(f"T={T} N={N} C={C} K={K}")
    a, d = make(rng, T, N, C, K, brgemm.bfloat16)
    fwd, bwd = reference(a, d)
    g = lstm.geometry(T, N, C, K, CFG)
    assert "w_ih" in reads_in_place(g, "bf16", "cpu", a["x"], a["w_ih"], a["w_hh"], None)
    ways = [frozenset(), frozenset({"w_ih"})] + [frozenset({"w_ih", "w_hh"})] * (T == 1)
    for in_place in ways:
        monkeypatch.setattr(lstm, "reads_in_place", lambda *args, v=in_place: v)
        saved = lstm.Saved()
        y, (hT, cT) = lstm.forward(**a, dtype="bf16", config=CFG, saved=saved)
        assert (saved.layer.wx is None) == ("w_ih" in in_place)
        assert (saved.layer.wh is None) == ("w_hh" in in_place)
        grads = lstm.backward(**d, **a, dtype="bf16", config=CFG, saved=saved)
        assert y.dtype == grads[3].dtype == brgemm.bfloat16
        check(["y", "hT", "cT"], (y, hT, cT), fwd, 1e-2)
        check(["dx", "dh0", "dc0", "dw_ih", "dw_hh", "db"], grads, bwd, 1e-2)


@pytest.mark.parametrize("case", range(6))
def test_backward_data_by_strips(rng, case):
    """lstm_strips.backward_data (W copied a strip of hidden blocks at a time,
    each strip's plan right after) against float64 NumPy on random tiles,
    padding included (W's padded rows are zeros, so dG's padding must not
    count), with strips of every size up to whole gates, ragged last strips,
    ragged gates and columns."""
    from primitives.lstm_strips import backward_data
    R, K, S = int(rng.integers(1, 4)), int(rng.integers(1, 70)), int(rng.integers(1, 100))
    group, chunk = int(rng.integers(1, 6)), int(rng.integers(1, 4))
    bs = (16, 32)[case % 2]
    cfg = {"fwd": {"bn": 16, "bc": bs, "bk": 16, "dx_group": group, "dx_chunk": chunk}}
    print(f"R={R} K={K} S={S} bs={bs} dx_group={group} dx_chunk={chunk}")
    g = lstm.geometry(1, 16, S, K, cfg)
    dG = rng.standard_normal((R, 4 * g.Kb, g.bn, g.bk)).astype(np.float32)  # padding too
    w = rng.standard_normal((4 * K, S)).astype(np.float32)
    Sb = -(-S // bs)
    out = np.full((R, Sb, g.bn, bs), np.nan, np.float32)
    bufs = {}

    def buffer(name, shape):
        return bufs.setdefault(name, np.full(10 ** 5, np.nan, np.float32))[
            :int(np.prod(shape))].reshape(shape)
    backward_data(g, dG, w, bs, out, buffer, "cpu")
    # the plain dG: rows R*bn, each gate's first K columns
    plain = dG.transpose(0, 2, 1, 3).reshape(R * g.bn, 4, g.Kb * g.bk)[:, :, :K]
    plain = plain.reshape(R * g.bn, 4 * K).astype(np.float64)
    want = plain @ w.astype(np.float64)
    got = out.transpose(0, 2, 1, 3).reshape(R * g.bn, Sb * bs)[:, :S]
    bound = 4 * K * np.finfo(np.float32).eps * (np.abs(plain) @ np.abs(w.astype(np.float64)))
    err = np.abs(got - want)
    print(f"max abs diff {err.max():.3e}, max bound {bound.max():.3e}")
    assert np.all(err <= bound + 1e-30)


@pytest.mark.parametrize("case", range(4))
def test_forward_makes_the_backward_tiles_either_task_split(rng, monkeypatch, case):
    """With a backward to follow (saved=) and whole blocks, the in-place
    projection copies the W_ih (T = 1: and W_hh) tiles it reads for the
    backward (copy_rows ops), under either task split of projection_t_plan:
    gradients against torch in float64."""
    from primitives import lstm_plans
    T, N = 1 + case % 2, int(rng.integers(1, 40))
    C, K = 32 * int(rng.integers(1, 4)), 16 * int(rng.integers(1, 4))
    print(f"T={T} N={N} C={C} K={K}")
    a, d = make(rng, T, N, C, K, np.float32)
    fwd, bwd = reference(a, d)
    for threads in (1, 10 ** 6):
        monkeypatch.setattr(lstm_plans, "cpu_threads", lambda t=threads: t)
        saved = lstm.Saved()
        y, (hT, cT) = lstm.forward(**a, config=CFG, saved=saved)
        made = {w for w in ("w_ih", "w_hh") if w + "_tiles" in saved.layer._blocked}
        assert made == ({"w_ih", "w_hh"} if T == 1 else {"w_ih"}) & saved.layer._in_place
        check(["y", "hT", "cT"], (y, hT, cT), fwd, 1e-5)
        check(["dx", "dh0", "dc0", "dw_ih", "dw_hh", "db"],
              lstm.backward(**d, **a, config=CFG, saved=saved), bwd, 1e-5)


@pytest.mark.parametrize("case", range(6))
def test_backward_data_copying_w_inside_the_plan(rng, monkeypatch, case):
    """The backward-data that copies the tiles of a W read in place inside its
    own plan (lstm_strips.copies_w: fc_plans.plan_copying on dG's and the
    output's tiles), forced on (its rule opened to every size, thread count
    and step count, the in-place choice to both weights at T = 1) on random
    shapes with ragged minibatch and input blocks, random reduction chunks:
    the forward makes no tiles of those weights, and every gradient matches
    torch's in float64. Hidden sizes not whole blocks keep the strips
    (copies_w empty)."""
    from primitives import fc, lstm_strips
    T = 1 if case % 2 == 0 else int(rng.integers(2, 4))
    N, C = int(rng.integers(1, 50)), int(rng.integers(1, 130))
    K = 16 * int(rng.integers(1, 5)) if case < 5 else 16 * int(rng.integers(1, 4)) + 5
    chunk = int(rng.choice((1, 2, 4, 8, 16)))  # divides the dx group (16)
    cfg = {"fwd": dict(CFG["fwd"], dx_chunk=chunk)}
    print(f"T={T} N={N} C={C} K={K} dx_chunk={chunk}")
    monkeypatch.setattr(fc, "COPY_MIN", 0)
    monkeypatch.setattr(fc, "COPY_TASKS", 0)
    monkeypatch.setattr(fc, "small_batch", lambda g: True)
    monkeypatch.setattr(lstm_strips, "COPY_THREADS", 0)
    monkeypatch.setattr(lstm_strips, "COPY_STEPS", T)
    in_place = frozenset({"w_ih", "w_hh"} if T == 1 else {"w_ih"})
    monkeypatch.setattr(lstm, "reads_in_place", lambda *args: in_place)
    a, d = make(rng, T, N, C, K, np.float32)
    fwd, bwd = reference(a, d)
    saved = lstm.Saved()
    y, (hT, cT) = lstm.forward(**a, config=cfg, saved=saved)
    layer = saved.layer
    copying = lstm_strips.copies_w(layer.g, in_place)
    assert copying == (in_place if K % layer.g.bk == 0 else frozenset())
    for w in copying:
        assert w + "_tiles" not in layer._blocked
    check(["y", "hT", "cT"], (y, hT, cT), fwd, 1e-5)
    grads = lstm.backward(**d, **a, config=cfg, saved=saved)
    check(["dx", "dh0", "dc0", "dw_ih", "dw_hh", "db"], grads, bwd, 1e-5)
    fresh = lstm.backward(**d, **a, config=cfg)  # the forward run again inside
    for g, f in zip(grads, fresh):
        np.testing.assert_array_equal(g, f)


def test_the_copying_rule_on_the_benchmark_shapes(monkeypatch):
    """copies_w: both weights of the single step at 16 threads (its rows few
    against W), none at 2 threads, none where W is small (small_t10_n64) or
    over several steps (the GNMT shapes), none where the gates are not whole
    blocks, none of weights not read in place."""
    from primitives import lstm_strips
    both = {"w_ih", "w_hh"}
    for threads in (2, 16, 32):
        monkeypatch.setattr(lstm_strips, "cpu_threads", lambda t=threads: t)
        for (T, N, C, K), want in (((1, 128, 2048, 1024), both if threads == 16 else set()),
                                   ((10, 64, 512, 512), set()), ((10, 64, 2048, 2048), set()),
                                   ((50, 64, 1024, 1024), set()), ((25, 128, 1024, 1024), set()),
                                   ((1, 128, 2048, 1000), set())):  # gates not whole blocks
            g = lstm.geometry(T, N, C, K)
            assert lstm_strips.copies_w(g, {"w_ih"} if T > 1 else both) == want, (T, N, C, K)
        assert lstm_strips.copies_w(lstm.geometry(1, 128, 2048, 1024), set()) == set()
