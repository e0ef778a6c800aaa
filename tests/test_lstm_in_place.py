"""The LSTM functional forms that read W_ih (and with one step W_hh) in place
(lstm_layer.reads_in_place): every path, forced, against torch.nn.LSTM in
float64 on random shapes with remainders (minibatch, input and hidden sizes
not whole blocks), equal to each other, and the rule's choice on the
benchmark shapes."""
import numpy as np
import pytest

from primitives import lstm
from primitives.lstm_layer import reads_in_place
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
        assert not reads_in_place(g, "bf16", "cpu", x, w, w, None)  # f32 only
        assert not reads_in_place(g, "f32", "cpu", x, w, w, object())  # kept blocked wins
        assert not reads_in_place(g, "f32", "cpu", x, np.zeros((2, 2), np.float32).T, w, None)
