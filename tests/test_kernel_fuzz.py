"""Hypothesis fuzz: random shapes, counts, forms, dtypes, alpha/beta and view
offsets against the float64 reference."""
import numpy as np
from conftest import assert_close, np_dtype, reference
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernel import run_form

import brgemm


@settings(max_examples=150, deadline=None)
@given(
    m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 40), count=st.integers(0, 12),
    form=st.sampled_from(["strd", "addr", "offs"]),
    dtype=st.sampled_from(["f32", "bf16"]),
    c_bf16=st.booleans(),
    alpha=st.sampled_from([1.0, -0.5, 3.0]), beta=st.sampled_from([1.0, 0.0, 0.25]),
    pad=st.integers(0, 5), seed=st.integers(0, 2**32 - 1),
)
def test_fuzz(m, n, k, count, form, dtype, c_bf16, alpha, beta, pad, seed):
    rng = np.random.default_rng(seed)
    dt = np_dtype(dtype)
    # blocks are views with `pad` extra columns so row strides vary too
    A = rng.standard_normal((count, m, k + pad)).astype(dt)[:, :, pad:]
    B = rng.standard_normal((count, k, n + pad)).astype(dt)[:, :, :n]
    c_dt = brgemm.bfloat16 if (dtype == "bf16" and c_bf16) else np.float32
    C0 = rng.standard_normal((m, n + pad)).astype(c_dt)[:, pad:]
    C = C0.copy()
    kern = brgemm.Kernel(m, n, k, dtype=dtype, alpha=alpha, beta=beta)
    if form == "offs":
        A, B = np.ascontiguousarray(A), np.ascontiguousarray(B)
    run_form(kern, form, A, B, C)
    assert_close(C, *reference(A, B, C0, alpha, beta), c_dt)
