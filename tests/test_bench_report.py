"""The benchmarks' check of ours against the other side (benchmarks.common):
a difference past the dtype's tolerance is reported, and a row timed despite
one stays out of the geomeans."""
import numpy as np
import pytest

from benchmarks import common


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_differs_names_what_and_by_how_much(rng, dtype):
    theirs = rng.standard_normal((7, 5)).astype(np.float32)
    scale = np.abs(theirs).max()
    tol = 1e-4 if dtype == "f32" else 3e-2
    close = theirs + np.float32(0.5 * tol * scale)
    assert common.differs("y", close, theirs, dtype, "oneDNN", bf16_tol=3e-2) is None
    far = theirs.copy()
    far[rng.integers(7), rng.integers(5)] += np.float32(3 * tol * scale)
    why = common.differs("y", far, theirs, dtype, "oneDNN", bf16_tol=3e-2)
    assert why.startswith("y: ours and oneDNN differ by ") and "relative to max" in why
    with pytest.raises(AssertionError, match=r"^y: ours and oneDNN differ"):
        common.check_close("y", far, theirs, dtype, "oneDNN", bf16_tol=3e-2)


def test_rows_whose_outputs_differ_stay_out_of_the_geomean(rng, monkeypatch, capsys):
    monkeypatch.setattr(common, "save_report", lambda *a, **k: None)
    ratios = rng.uniform(0.5, 2.0, 3)
    rows = [dict(shape=f"s{i}", pass_="fwd", ratio=float(r)) for i, r in enumerate(ratios)]
    rows[1]["mismatch"] = "s1 y: ours and oneDNN differ by 1.30e+00 (relative to max)"
    common.finish_report("test", rows, ("fwd",))
    out = capsys.readouterr().out
    assert f"geomean ours/oneDNN fwd: {common.geomean([ratios[0], ratios[2]]):.2f}" in out
    assert "left out of the geomean (outputs differ): s1" in out


@pytest.mark.parametrize("env, bound", [
    ({}, False), ({"OMP_PROC_BIND": "false"}, False), ({"OMP_PROC_BIND": "FALSE"}, False),
    ({"OMP_PROC_BIND": "close"}, True), ({"OMP_PROC_BIND": "true"}, True),
    ({"OMP_PROC_BIND": "spread,close"}, True), ({"OMP_PLACES": "cores"}, True),
    ({"OMP_PROC_BIND": "false", "OMP_PLACES": "cores"}, False),
    ({"GOMP_CPU_AFFINITY": "0-3"}, True)])
def test_bound_threads_reads_the_openmp_binding(monkeypatch, env, bound):
    """set_threads leaves this thread where the OpenMP runtime bound it
    exactly where OMP_PROC_BIND, or OMP_PLACES / GOMP_CPU_AFFINITY alone,
    bind."""
    for name in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert common.bound_threads() is bound
