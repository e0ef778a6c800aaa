"""Functional calls remembered by signature (primitives.call_memo): a repeat
of a call's signature skips its checks and decisions, so everything those
read must be in the signature. Repeats on fresh data stay right, arguments
that differ in anything checked are checked again, and a changed config
is seen."""
import time

import numpy as np
import pytest

from brgemm.config import ConfigError
from primitives import _config, conv, fc


def _conv_reference(x, w, stride, padding):
    import torch
    return torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)),
                                      torch.from_numpy(w.astype(np.float64)),
                                      stride=stride, padding=padding).numpy()


def _close(got, want, scale):
    assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-6)


def test_repeats_on_fresh_data(rng):
    """The same signature again and again, new values each time: conv.forward,
    conv.backward, fc.forward and fc.backward against float64."""
    import torch
    for trial in range(3):
        N, C, K = (int(v) for v in rng.integers(1, 5, 3) * 8)
        H = int(rng.integers(3, 10))
        R, stride, padding = int(rng.choice([1, 3])), int(rng.integers(1, 3)), int(rng.integers(0, 2))
        print(f"trial {trial}: N={N} C={C} K={K} H={H} R={R} stride={stride} padding={padding}")
        for _ in range(3):
            x = rng.standard_normal((N, C, H, H)).astype(np.float32)
            w = rng.standard_normal((K, C, R, R)).astype(np.float32)
            want = _conv_reference(x, w, stride, padding)
            scale = _conv_reference(np.abs(x), np.abs(w), stride, padding)
            _close(conv.forward(x, w, stride, padding), want, scale)
            dy = rng.standard_normal(want.shape).astype(np.float32)
            tx = torch.from_numpy(x.astype(np.float64)).requires_grad_()
            tw = torch.from_numpy(w.astype(np.float64)).requires_grad_()
            torch.nn.functional.conv2d(tx, tw, stride=stride, padding=padding).backward(
                torch.from_numpy(dy.astype(np.float64)))
            dx, dw = conv.backward(dy, x, w, stride, padding)
            _close(dx, tx.grad.numpy(), np.abs(dy).sum() * np.abs(w).max())
            _close(dw, tw.grad.numpy(), np.abs(dy).sum() * np.abs(x).max())
            xf, wf = x.reshape(N, -1)[:, :C], rng.standard_normal((K, C)).astype(np.float32)
            xf = np.ascontiguousarray(xf)
            b = rng.standard_normal(K).astype(np.float32)
            yf = fc.forward(xf, wf, b)
            _close(yf, xf.astype(np.float64) @ wf.T.astype(np.float64) + b,
                   np.abs(xf) @ np.abs(wf).T + np.abs(b))
            dyf = rng.standard_normal((N, K)).astype(np.float32)
            dxf, dwf, dbf = fc.backward(dyf, xf, wf)
            _close(dxf, dyf.astype(np.float64) @ wf, np.abs(dyf) @ np.abs(wf))
            _close(dwf, dyf.T.astype(np.float64) @ xf, np.abs(dyf).T @ np.abs(xf))
            _close(dbf, dyf.astype(np.float64).sum(0), np.abs(dyf).sum(0))


def test_arguments_that_differ_are_checked_again(rng):
    """After a remembered call, arguments equal to its own by value but not by
    type, of another dtype or layout, or of sizes that do not fit, get the
    errors (or the results) a first call gets."""
    x = rng.standard_normal((2, 8, 6, 6)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    for _ in range(2):
        y = conv.forward(x, w, 1, 1)
    for bad in (True, 1.0):
        with pytest.raises(TypeError, match="stride"):
            conv.forward(x, w, bad, 1)
    with pytest.raises(TypeError, match="x"):
        conv.forward(x.astype(np.float64), w, 1, 1)
    with pytest.raises(ValueError, match="dtype"):
        conv.forward(x, w, 1, 1, dtype=1)
    with pytest.raises(ValueError, match="dy"):
        conv.backward(y[:, :, :5], x, w, 1, 1)
    conv.backward(y, x, w, 1, 1)
    with pytest.raises(TypeError, match="need_dx"):
        conv.backward(y, x, w, 1, 1, need_dx=1)
    strided = np.asfortranarray(x)  # not C-contiguous: never remembered, still right
    _close(conv.forward(strided, w, 1, 1), _conv_reference(x, w, 1, 1),
           _conv_reference(np.abs(x), np.abs(w), 1, 1))
    xf, wf = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((6, 8)).astype(
        np.float32)
    for _ in range(2):
        fc.forward(xf, wf)
    with pytest.raises(TypeError, match="x"):
        fc.forward(xf.tolist(), wf)
    with pytest.raises(ValueError, match="w"):
        fc.forward(xf, wf[:, :7].copy())
    with pytest.raises(ValueError, match="b"):
        fc.forward(xf, wf, np.ones(5, np.float32))


def test_a_changed_config_is_seen(rng, tmp_path, monkeypatch):
    """A remembered call follows its config: a new BRGEMM_CONFIG at once, and
    a file rewritten in place within primitives._config.RECHECK_NS (a bad key
    in it raises, where a stale remembered call would have run)."""
    xf, wf = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((6, 8)).astype(
        np.float32)
    good = tmp_path / "good.toml"
    good.write_text('[fc.fwd."N=4,C=8,K=6"]\nbn = 8\n')
    monkeypatch.setenv("BRGEMM_CONFIG", str(good))
    for _ in range(2):
        fc.forward(xf, wf)
    bad = tmp_path / "bad.toml"
    bad.write_text("[fwd]\nbq = 1\n")
    monkeypatch.setenv("BRGEMM_CONFIG", str(bad))
    with pytest.raises(ConfigError, match="bq"):
        fc.forward(xf, wf)
    monkeypatch.setenv("BRGEMM_CONFIG", str(good))
    fc.forward(xf, wf)
    monkeypatch.setattr(_config, "RECHECK_NS", 50_000_000)  # the mechanism, sooner
    good.write_text("[fwd]\nbq = 2\n")  # another size: a new stamp
    time.sleep(2 * _config.RECHECK_NS / 1e9)
    with pytest.raises(ConfigError, match="bq"):
        fc.forward(xf, wf)
