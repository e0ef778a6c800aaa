"""LSTM, one layer, one direction, as loop nests around the batch-reduce kernel.

    x [T,N,C], h0 c0 [N,K], w_ih [4K,C], w_hh [4K,K], b [4K] -> y [T,N,K], (hT, cT)
    gates i, f, g, o (torch.nn.LSTM):  G = x_t W_ih^T + h_{t-1} W_hh^T + b
    c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(g),   h_t = sigmoid(o) tanh(c_t)

Blocked layouts (tiles, zero-padded; every gate padded to Kp = Kb*bk columns):
    x  [T*Nb][Cb][bn][bc]     G, dG [T*Nb][4*Kb][bn][bk]    h, c [T+1][Nb][Kb][bn][bk]
The work splits into what has no time dependence and what has:
  - input projection G = x W_ih^T + b for all steps at once: one large FC
    forward (fc.forward_nest), parallel over steps, minibatch and gates. This
    hoisting turns T small GEMMs into one big one; see RESULTS.md for numbers;
  - per step t (a phase each, barriers between): the recurrent batch-reduce
    G[t] += h[t-1] W_hh^T over the K blocks of h, for the four gates of an
    output block in one task, the last call carrying the cell as an epilogue
    (lstm_cell: activations, c_t, h_t, all while the block is hot);
  - backward through time: per step (reverse) the cell's derivatives
    element-wise, then dh_{t-1} = dG_t W_hh (an FC backward-data plan); after
    the loop dx = dG W_ih, dW_ih = dG^T x, dW_hh = dG^T h_prev, db = sum dG as
    three large FC plans over all steps at once.
"""
import json
import threading

import numpy as np

from brgemm.lru import LRU
from primitives import reuse as _reuse
from primitives._args import backend_name, flag, operands
from primitives.lstm_plans import (  # noqa: F401  (public names)
    Geometry, SCHEMA, backward_nest, backward_plan, geometry, recurrent_nest, recurrent_plan)
from primitives.lstm_layer import LSTM, _check_x
from primitives.lstm_strips import reads_in_place
from primitives.lstm_weights import (  # noqa: F401  (public names)
    block_weights, transpose_tiles, vnni_operands)


# ---------------------------------------------------------------- functional API


class Saved:
    """What lstm.forward(..., saved=s) keeps for lstm.backward(..., saved=s): the
    forward's gates and states, so the backward need not run the forward again
    (torch autograd saves the same). The backward uses them only if it gets the
    very same arrays (identity and address) and options; the caller promises
    that their contents did not change in between. One forward at a time."""

    def __init__(self):
        self.layer, self.stamp = None, None


def _stamp(arrays, options):
    # anything but an array stamps as itself: the checks that follow name it
    return (tuple((id(a), a.__array_interface__["data"][0], a.shape, a.strides)
                  if isinstance(a, np.ndarray) else (id(a),) for a in arrays), options)


_engines = threading.local()  # .layers: this thread's engines by shape and options
ENGINES_PER_THREAD = 16  # functional calls' LSTM engines one thread keeps (brgemm/lru.py)


def _layer(x, w_ih, w_hh, b, dtype, backend, config, token, site, saved=None):
    """An LSTM engine holding these weights: the caller's Saved one, else one
    per thread and options, reused from call to call (plans, buffers, and the
    blocked weights when `token` says they are unchanged and have been since
    the last call from `site`; primitives.reuse)."""
    operands(dtype, w_ih, w_hh, b, names=("w_ih", "w_hh", "b"), ndim=None)
    if w_ih.ndim != 2 or w_ih.shape[0] % 4 or w_ih.shape[0] == 0:
        raise ValueError(f"w_ih: expected shape (4K, C), got {w_ih.shape}")
    K, C = w_ih.shape[0] // 4, w_ih.shape[1]
    if w_hh.shape != (4 * K, K):
        raise ValueError(f"w_hh: expected shape ({4 * K}, {K}) to match w_ih's 4K = {4 * K}, "
                         f"got {w_hh.shape}")
    if b.shape != (4 * K,):
        raise ValueError(f"b: expected shape ({4 * K},), got {b.shape}")
    _check_x(x, C, dtype)
    backend = backend_name(backend)
    if saved is not None:
        layer = saved.layer
        if layer is None or (layer.C, layer.K, layer.dtype, layer.backend, layer.config) != \
                (C, K, dtype, backend, config):
            layer = saved.layer = LSTM(C, K, dtype=dtype, backend=backend, config=config,
                                       init=False)
    else:
        engines = getattr(_engines, "layers", None)
        if engines is None:
            engines = _engines.layers = LRU(ENGINES_PER_THREAD)
        key = (C, K, dtype, backend,
               None if config is None else json.dumps(config, sort_keys=True, default=str))
        layer = engines.get_or_make(key, lambda: LSTM(C, K, dtype=dtype, backend=backend,
                                                      config=config, init=False))
    T, N = x.shape[:2]
    layer.prepare(T, N)
    token = _reuse.steady(token, (site, layer.g, dtype, backend), (w_ih, w_hh, b))
    in_place = reads_in_place(layer.g, dtype, backend, x, w_ih, w_hh, token)
    layer.set_weights(w_ih, w_hh, b, token, in_place)
    return layer


def _check_saved(saved):
    if saved is not None and not isinstance(saved, Saved):
        raise TypeError(f"saved: expected an lstm.Saved(), got {type(saved).__name__}")
    return saved


def forward(x, h0, c0, w_ih, w_hh, b, dtype="f32", backend=None, config=None, reuse=None,
            saved=None):
    """torch.nn.LSTM's forward: y [T, N, K], (hT, cT). reuse: keep the blocked
    weights across calls (primitives.reuse); saved: an lstm.Saved() that keeps
    this forward's state for lstm.backward(..., saved=)."""
    token, saved = _reuse.check(reuse), _check_saved(saved)
    layer = _layer(x, w_ih, w_hh, b, dtype, backend, config, token, "lstm.forward", saved)
    out = layer.forward(x, h0, c0, backward_next=saved is not None)
    if saved is not None:
        saved.stamp = _stamp((x, h0, c0, w_ih, w_hh, b), (dtype, layer.backend, repr(config)))
    return out


def backward(dy, dhT, dcT, x, h0, c0, w_ih, w_hh, b, dtype="f32", backend=None, config=None,
             reuse=None, saved=None, *, need_dx=True, need_dw=True):
    """Gradients: dx, dh0, dc0, dw_ih, dw_hh, db. Runs the forward again unless
    `saved` holds the forward of these same arrays (lstm.Saved). need_dx=False:
    dx is not computed (None in its place), for input that wants no gradient;
    need_dw=False likewise dw_ih, dw_hh and db (frozen weights). All come
    back in dy's dtype."""
    need_dx, need_dw = flag(need_dx, "need_dx"), flag(need_dw, "need_dw")
    token, saved = _reuse.check(reuse), _check_saved(saved)
    stamp = None if saved is None else _stamp((x, h0, c0, w_ih, w_hh, b),
                                              (dtype, backend_name(backend), repr(config)))
    if saved is not None and saved.layer is not None and saved.stamp == stamp:
        layer = saved.layer
        _check_x(x, layer.C, dtype)
    else:
        layer = _layer(x, w_ih, w_hh, b, dtype, backend, config, token, "lstm.backward", saved)
        layer.forward(x, h0, c0, backward_next=True)
        if saved is not None:
            saved.stamp = stamp
    dx, dh0, dc0 = layer.backward(dy, dhT, dcT, plain_grads=True, need_dx=need_dx,
                                  need_dw=need_dw)
    out = dh0.dtype  # dy's: every gradient in it, as fc.backward's and conv.backward's
    return (dx, dh0, dc0, layer._grad("w_ih", out), layer._grad("w_hh", out),
            layer._grad("b", out))
