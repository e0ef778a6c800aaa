"""Plans: the same loop nest run eagerly and recorded then replayed, against
float64 NumPy; thread counts, specs, barriers, epilogues, configs, bad input."""
import numpy as np
import pytest

import brgemm
from brgemm import plan as P
from primitives import gemm


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def gemm_ref(A, B):
    return A.astype(np.float64) @ B.astype(np.float64), np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))


def close(C, ref, mag, rel=1e-5):
    err = np.abs(C - ref)
    print(f"max abs diff {err.max():.3e}")
    assert np.all(err <= rel * (mag + 1e-30))


SPECS = ["IJk", "JIk", "ijk", "Ijk", "iJk", "kIJ", "k|IJ", "jIk"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("M,N,K", [(64, 64, 64), (37, 70, 130), (1, 1, 1), (5, 200, 7), (96, 33, 300)])
def test_gemm_eager_and_replay_match_numpy(rng, spec, M, N, K):
    A, B = rand(rng, M, K), rand(rng, K, N)
    cfg = {"fwd": {"spec": spec, "bm": 16, "bn": 32, "bk": 32, "kc": 64}}
    C_plan = gemm.forward(A, B, config=cfg)
    C_eager = gemm.forward(A, B, config=cfg, eager=True)
    close(C_plan, *gemm_ref(A, B))
    np.testing.assert_array_equal(C_plan, C_eager)  # same calls, same order per block


def test_gemm_bf16(rng):
    A, B = rand(rng, 40, 50, dtype=brgemm.bfloat16), rand(rng, 50, 70, dtype=brgemm.bfloat16)
    close(gemm.forward(A, B, dtype="bf16"), *gemm_ref(A, B))


def test_bitwise_identical_across_runs_and_thread_counts(rng):
    A, B = rand(rng, 200, 300), rand(rng, 300, 260)
    p = gemm.plan(200, 260, 300)
    outs = []
    for threads in (1, 2, 3, 2, 1):
        C = np.full((200, 260), np.nan, np.float32)
        p.run(threads=threads, A=A, B=B, C=C)
        outs.append(C)
    for C in outs[1:]:
        assert np.array_equal(C, outs[0])


def test_parallel_reduction_is_refused():
    """Parallel k chunks would make two threads write one C block: caught at record time."""
    with pytest.raises(ValueError, match="two parallel tasks of one phase write the same"):
        gemm.plan(64, 64, 256, config={"fwd": {"spec": "Kij", "bm": 32, "bn": 32, "bk": 32, "kc": 64}})


def test_spec_in_toml_changes_the_recorded_call_order(tmp_path, monkeypatch):
    def c_offsets(spec):
        f = tmp_path / f"{spec}.toml"
        f.write_text(f'[gemm.fwd]\nspec = "{spec}"\nbm = 16\nbn = 32\nbk = 32\nkc = 64\n')
        monkeypatch.setenv("BRGEMM_CONFIG", str(f))
        p = gemm.plan(64, 96, 64)
        return [int(c["c_off"]) for c in p.calls], len(p.task_begin) - 1

    ij, tasks_ij = c_offsets("ijk")
    ji, tasks_ji = c_offsets("jik")
    assert sorted(ij) == sorted(ji) and ij != ji
    assert ij[:3] == [0, 32, 64] and ji[:3] == [0, 16 * 96, 32 * 96]
    assert tasks_ij == tasks_ji == 1  # no upper case: one task, no parallelism
    _, tasks = c_offsets("IJk")
    assert tasks == 4 * 3


def test_barrier_makes_phases():
    p = gemm.plan(64, 64, 256, config={"fwd": {"spec": "k|IJ", "bm": 32, "bn": 32, "bk": 32,
                                               "kc": 64}})
    assert len(p.phase_begin) - 1 == 4  # one phase per k chunk
    assert "4 phases" in p.summary(threads=2)


def epilogue_nest(ex, M, N, K, ops_for):
    """Two C blocks side by side, each with its own epilogue."""
    half = N // 2
    for t, j in enumerate((0, half)):
        ex.at((), (t,))
        ex.gemm(P.Block(M, half, K, lda=K, ldb=N, ldc=N, beta=0.0), "A", [0], "B", [j], "C", j,
                ops=ops_for(j))


@pytest.mark.parametrize("name", ["bias_relu", "bias_rows", "sigmoid", "tanh", "store_bf16"])
def test_epilogues(rng, name):
    M, N, K = 40, 128, 13  # ops chained on 40 rows run in chunks of 32 (2048 / 64)
    A, B, bias, rows = rand(rng, M, K), rand(rng, K, N), rand(rng, N), rand(rng, M + 3)
    ops_for = {
        "bias_relu": lambda j: (P.bias("b", j), P.relu()),
        "bias_rows": lambda j: (P.bias_rows("r", 3), P.relu()),
        "sigmoid": lambda j: (P.sigmoid(),),
        "tanh": lambda j: (P.tanh(),),
        "store_bf16": lambda j: (P.store_bf16("Y", j, N),),
    }[name]
    ref = A.astype(np.float64) @ B
    want = {"bias_relu": np.maximum(ref + bias, 0), "bias_rows": np.maximum(ref + rows[3:, None], 0), "sigmoid": 1 / (1 + np.exp(-ref)),
            "tanh": np.tanh(ref), "store_bf16": ref}[name]
    tensors = {"A": "f32", "B": "f32", "C": "f32", "b": "f32", "r": "f32", "Y": "bf16"}
    rec = P.Recorder(tensors)
    epilogue_nest(rec, M, N, K, ops_for)
    plan = rec.finish()
    arrays = lambda: dict(A=A, B=B, b=bias, r=rows, C=np.zeros((M, N), np.float32),  # noqa: E731
                          Y=np.zeros((M, N), brgemm.bfloat16))
    replay, eager = arrays(), arrays()
    plan.run(**replay)
    epilogue_nest(P.Eager(**eager), M, N, K, ops_for)
    np.testing.assert_allclose(replay["C"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(eager["C"], want, rtol=1e-5, atol=1e-5)
    if name == "store_bf16":
        np.testing.assert_allclose(replay["Y"].astype(np.float64), want, rtol=1e-2, atol=1e-2)
        np.testing.assert_array_equal(replay["Y"], eager["Y"])


def test_store_t_random_shapes(rng):
    """store_t alone (f32 and bf16: conv's NCHW stores), on random block sizes
    past and under the copies' 32 x 32 and 16 x 16 sub-blocks and random row
    strides: the replay bit for bit against the eager path and against C
    rounded by ml_dtypes; the destination's columns past m stay untouched."""
    for _ in range(12):
        m, n, k = (int(v) for v in rng.integers(1, 80, 3))
        ld = m + int(rng.integers(0, 9))
        A, B = rand(rng, m, k), rand(rng, k, n)
        for bf16 in (False, True):
            dt = brgemm.bfloat16 if bf16 else np.float32
            outs = []
            for ex in ("eager", "replay"):
                arrays = dict(A=A, B=B, C=np.zeros((m, n), np.float32),
                              T=np.full(n * ld, 7, dt))
                blk = P.Block(m, n, k, lda=k, ldb=n, ldc=n, beta=0.0)
                ops = (P.store_t("T", 0, ld, bf16=bf16),)
                if ex == "eager":
                    P.Eager(**arrays).gemm(blk, "A", [0], "B", [0], "C", 0, ops=ops)
                else:
                    rec = P.Recorder(dict(A="f32", B="f32", C="f32", T="bf16" if bf16 else "f32"))
                    rec.gemm(blk, "A", [0], "B", [0], "C", 0, ops=ops)
                    rec.finish().run(**arrays)
                outs.append(arrays)
            print(f"m={m} n={n} k={k} ld={ld} bf16={bf16}")
            for got in outs:
                T = got["T"].reshape(n, ld)
                np.testing.assert_array_equal(T[:, :m], got["C"].T.astype(dt))
                assert np.all(T[:, m:].astype(np.float32) == 7)
            np.testing.assert_array_equal(outs[0]["T"], outs[1]["T"])


def test_summary_counts():
    p = gemm.plan(64, 64, 64, config={"fwd": {"spec": "IJk", "bm": 32, "bn": 32, "bk": 32,
                                              "kc": 64}})
    text = p.summary(threads=2)
    assert "4 calls in 4 tasks, 1 phases" in text
    assert f"{2 * 64**3 / 1e9:.3f} GFLOP" in text
    assert "max/mean 1.00" in text
    assert p.flops == 2 * 64**3


class TestBadInput:
    def setup_method(self):
        self.plan = gemm.plan(8, 8, 8)
        self.ok = dict(A=np.ones((8, 8), np.float32), B=np.ones((8, 8), np.float32),
                       C=np.zeros((8, 8), np.float32))

    def run(self, **changes):
        arrays = {**self.ok, **changes}
        arrays = {k: v for k, v in arrays.items() if v is not None}
        self.plan.run(**arrays)

    def test_missing_and_unknown_tensors(self):
        with pytest.raises(ValueError, match="^B: the plan needs it"):
            self.run(B=None)
        with pytest.raises(ValueError, match="^D: not a tensor of this plan"):
            self.run(D=np.ones(3))

    def test_wrong_arrays(self):
        with pytest.raises(TypeError, match="^A: expected dtype f32"):
            self.run(A=np.ones((8, 8)))
        with pytest.raises(TypeError, match="^A: expected a numpy.ndarray"):
            self.run(A=[1.0] * 64)
        with pytest.raises(ValueError, match="^B: the plan touches 64 elements, the array has 63"):
            self.run(B=np.ones(63, np.float32))
        with pytest.raises(ValueError, match="^A: a plan reads tensors as flat buffers"):
            self.run(A=np.ones((8, 16), np.float32)[:, ::2])
        ro = np.zeros((8, 8), np.float32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="^C: is read-only"):
            self.run(C=ro)
        with pytest.raises(ValueError, match="^C: overlaps A"):
            self.run(C=self.ok["A"])
        with pytest.raises(ValueError, match="^threads: expected a positive int"):
            self.plan.run(threads=0, **self.ok)

    def test_each_run_checks_its_own_arrays(self, rng):
        """The run's native checks (kernels/cpu/bound_plan.h) see each call's
        arrays afresh: a partial overlap after clean runs, a buffer one element
        short, a read-only view; arrays it is stricter about than Plan.check
        (a subclass, an equal dtype of another object) still run, correctly."""
        self.run()
        big = np.zeros(160, np.float32)
        A, C = big[:64], big[48:112]  # C's first 16 elements are A's last
        with pytest.raises(ValueError, match="^C: overlaps A"):
            self.run(A=A, C=C)
        A, C = big[:64], big[64:128]  # adjacent, not overlapping: runs
        A[:] = rand(rng, 64)
        B = rand(rng, 8, 8)
        self.run(A=A, B=B, C=C)
        ref, mag = gemm_ref(A.reshape(8, 8), B)
        close(C.reshape(8, 8), ref, mag)
        with pytest.raises(ValueError, match="^B: the plan touches 64 elements, the array has 63"):
            self.run(B=np.ones(64, np.float32)[1:])
        ro = np.zeros(64, np.float32).reshape(8, 8)  # a read-only view of a writeable array
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="^C: is read-only"):
            self.run(C=ro)

        class Sub(np.ndarray):
            pass
        for A in (rand(rng, 8, 8).view(Sub), rand(rng, 8, 8).astype(
                np.dtype(np.float32, metadata={"m": 1}))):
            C = np.zeros((8, 8), np.float32)
            self.run(A=A, B=B, C=C)
            ref, mag = gemm_ref(np.asarray(A), B)
            close(C, ref, mag)

    def test_recorder_checks(self):
        rec = P.Recorder({"A": "f32", "B": "f32", "C": "f32"})
        blk = P.Block(2, 2, 2, lda=2, ldb=2, ldc=2)
        with pytest.raises(ValueError, match="^a: unknown tensor 'X'"):
            rec.gemm(blk, "X", [0], "B", [0], "C", 0)
        with pytest.raises(ValueError, match="^b_offs: 2 offsets, a_offs has 1"):
            rec.gemm(blk, "A", [0], "B", [0, 4], "C", 0)
        with pytest.raises(ValueError, match="^a: negative offset"):
            rec.gemm(blk, "A", [-2], "B", [0], "C", 0)
        with pytest.raises(ValueError, match="^a: tensor 'A' is f32, the block wants bf16"):
            rec.gemm(P.Block(2, 2, 2, 2, 2, 2, dtype="bf16"), "A", [0], "B", [0], "C", 0)

    def test_lstm_cell_bwd_operand_types(self):
        rec = P.Recorder(dict.fromkeys(("A", "B", "C", "dy", "G", "c", "dc", "dG", "D"), "f32"))
        blk = P.Block(2, 2, 2, lda=2, ldb=2, ldc=2)
        op = P.lstm_cell_bwd("dy", 0, "G", 0, 4, "c", 4, 0, "dc", 0, "dG", 0, 2, dgates16="D")
        with pytest.raises(ValueError, match="^lstm_cell_bwd: tensor 'D' is not bf16"):
            rec.gemm(blk, "A", [0], "B", [0], "C", 0, ops=(op,))

    def test_native_layer_rejects_a_corrupted_plan(self):
        p = gemm.plan(8, 8, 8, config={"fwd": {"spec": "ijk", "bm": 8, "bn": 8, "bk": 8, "kc": 8}})
        with pytest.raises(ValueError, match="read-only"):  # checked once, then fixed
            p.calls["kernel"][0] = 7
        from brgemm.backend.cpu import ffi
        native = p.replay("cpu").native  # the C struct the CPU replays, corrupted behind its back
        calls = p.calls.copy()
        calls["kernel"][0] = 7  # only kernel 0 exists
        good, bad = native.calls, ffi.from_buffer("brgemm_plan_call[]", calls)
        native.calls = bad
        with pytest.raises(ValueError, match="native layer rejected"):
            p.run(**self.ok)
        native.calls = good
        p.run(**self.ok)


def test_lstm_cell_epilogue(rng):
    """Four gate blocks side by side in one [M, 4H] tensor; the op on the last
    gate's call turns them into c and h, and leaves the activated gates."""
    M, H, K = 6, 8, 5
    x, w = rand(rng, M, K), rand(rng, K, 4 * H)
    c_prev = rand(rng, M, H)

    def nest(ex):
        ex.at((), ())
        for q in range(4):
            ops = (P.lstm_cell("G", 0, H, "cp", 0, "c", 0, "h", 0, ld=H),) if q == 3 else ()
            ex.gemm(P.Block(M, H, K, lda=K, ldb=4 * H, ldc=4 * H, beta=0.0), "x", [0], "w",
                    [q * H], "G", q * H, ops=ops)

    arrays = lambda: dict(x=x, w=w, cp=c_prev, G=np.zeros((M, 4 * H), np.float32),  # noqa: E731
                          c=np.zeros((M, H), np.float32), h=np.zeros((M, H), np.float32))
    rec = P.Recorder(dict.fromkeys(["x", "w", "cp", "G", "c", "h"], "f32"))
    nest(rec)
    replay, eager = arrays(), arrays()
    rec.finish().run(**replay)
    nest(P.Eager(**eager))
    z = x.astype(np.float64) @ w
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, f, g, o = sig(z[:, :H]), sig(z[:, H:2 * H]), np.tanh(z[:, 2 * H:3 * H]), sig(z[:, 3 * H:])
    c = f * c_prev + i * g
    for got in (replay, eager):
        np.testing.assert_allclose(got["c"], c, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["h"], o * np.tanh(c), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["G"], np.hstack([i, f, g, o]), rtol=1e-5, atol=1e-5)


def test_native_plan_is_checked_once_and_sealed(rng):
    """The CPU replay checks its plan's tables once, when it is made (sealed),
    not on every run: a run reads private copies of them, so a change to the
    Plan's own tables after that changes nothing; a struct whose tables or
    counts changed after sealing, or one never sealed, is refused, and a plan
    with an inconsistent index is refused when sealed."""
    from brgemm.backend import cpu
    M, N, K = (int(v) for v in rng.integers(2, 9, 3))
    print("M N K", M, N, K)
    A, B = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (K, N)))
    rec = P.Recorder(dict(A="f32", B="f32", C="f32"))
    rec.gemm(P.Block(M, N, K, lda=K, ldb=N, ldc=N, beta=0.0), "A", [0], "B", [0], "C", 0)
    plan = rec.finish()
    C = np.empty((M, N), np.float32)
    plan.run(A=A, B=B, C=C)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5)
    replay = plan._replays["cpu"]
    native, lib, ffi = replay.native, cpu.lib, cpu.ffi
    tensors = ffi.new("void *[]", [cpu.address(a) for a in (A, B, C)])
    assert native.seal != 0 and lib.brgemm_cpu_plan_run(native, tensors, 1) == lib.BRGEMM_OK
    calls = plan.calls.copy()
    plan.calls.flags.writeable = True
    plan.calls["a"] = 7  # no such tensor slot: the replay's own copy is unchanged
    C[...] = np.nan
    plan.run(A=A, B=B, C=C)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5)
    plan.calls[...] = calls
    n_calls = native.n_calls
    native.n_calls = n_calls + 1  # counts changed after sealing: no longer the sealed plan
    assert lib.brgemm_cpu_plan_run(native, tensors, 1) == lib.BRGEMM_EINVAL
    assert lib.brgemm_cpu_plan_time_bare(native, tensors, 1, ffi.new("double *")) == \
        lib.BRGEMM_EINVAL
    native.n_calls = n_calls
    assert lib.brgemm_cpu_plan_run(native, tensors, 1) == lib.BRGEMM_OK
    bad = ffi.new("brgemm_plan_call[]", 1)
    bad[0] = native.calls[0]
    bad[0].a = 7  # an index past the plan's 3 tensor slots
    unsealed = ffi.new("brgemm_cpu_plan *", {f: getattr(native, f) for f in dir(native)})
    unsealed.seal = 0
    assert lib.brgemm_cpu_plan_run(unsealed, tensors, 1) == lib.BRGEMM_EINVAL
    unsealed.calls = bad
    assert lib.brgemm_cpu_plan_seal(unsealed) == lib.BRGEMM_EINVAL and unsealed.seal == 0
    unsealed.calls = native.calls
    assert lib.brgemm_cpu_plan_seal(unsealed) == lib.BRGEMM_OK
    assert lib.brgemm_cpu_plan_run(unsealed, tensors, 1) == lib.BRGEMM_OK


def test_recorder_refuses_what_eager_refuses(rng):
    """A call whose C block overlaps its own A or B block in the same tensor,
    and offsets that are not integers: refused when recorded, as Eager and
    Kernel refuse them when run, not replayed into wrong results."""
    m, n, k = (int(v) for v in rng.integers(2, 9, 3))
    blk = P.Block(m, n, k, lda=k, ldb=n, ldc=n, beta=0.0)
    a_size = m * k
    for role, call in (("A", lambda ex: ex.gemm(blk, "t", [0], "b", [0], "t", a_size - 1)),
                       ("B", lambda ex: ex.gemm(blk, "a", [0], "t", [n], "t", 0))):
        rec = P.Recorder({"t": "f32", "a": "f32", "b": "f32"})
        rec.at(0, 0)
        with pytest.raises(ValueError, match=f"^c: .* overlaps one of the call's {role} blocks"):
            call(rec)
    rec = P.Recorder({"t": "f32", "a": "f32", "b": "f32"})
    rec.at(0, 0)
    rec.gemm(blk, "t", [0], "b", [0], "t", a_size)  # C right after A in the same tensor: fine
    with pytest.raises(TypeError, match="^c_off: "):
        rec.gemm(blk, "a", [0], "b", [0], "t", 2.0)
    rec.gemm(blk, "a", [0.5], "b", [0], "t", a_size)
    with pytest.raises(TypeError, match="^a_offs: expected integer"):
        rec.finish()
