"""primitives.nn.LSTM: torch.nn.LSTM (one layer, one direction) whose forward
and backward run lstm.LSTM, one kept per module with its blocked weights,
rebuilt when a parameter's storage or version counter changes. What it does
not take (stacks, bidirectional, projections) is named by _lstm_unsupported."""
import threading
import weakref

import numpy as np
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from primitives import lstm, reuse
from primitives.nn_tensors import (_array, _autocast, _autocast_args, _cast, _dtype, _not_traced,
                                   _tensor)


def _lstm_unsupported(m):
    """Why lstm cannot run nn.LSTM module m (None if it can)."""
    if m.num_layers != 1:
        return f"num_layers: only a single layer is supported, got {m.num_layers}"
    if m.bidirectional:
        return "bidirectional: only one direction is supported"
    if m.proj_size:
        return f"proj_size: projections are not supported, got {m.proj_size}"
    return None


class _LayerCache:
    """One lstm.LSTM layer per module, its blocked weights tagged with the
    parameters' state they were built from (reuse.tensor_state: storage, version
    and the optimizer steps counted; the storages held, so none comes back at
    their address). The layer's buffers and saved state are one call's at a
    time: `lock` serialises the module's calls from several threads."""

    def __init__(self):
        self.layer, self.key, self.held, self.owner = None, None, None, None
        self.lock = threading.RLock()  # (re-entered by a thread: no hang)

    def layer_for(self, dtype, C, K, params, T, N):
        if self.layer is None or self.layer.dtype != dtype:
            self.layer, self.key = lstm.LSTM(C, K, dtype=dtype, init=False), None
        layer = self.layer
        params_ = [p for p in params if p is not None]
        # inference tensors have no version counter: a key equal to nothing
        key = (object(),) if any(p.is_inference() for p in params_) else \
            reuse.tensor_state(params_)
        if key != self.key:
            _set_weights(layer, *params)
            self.held = [p.detach() for p in params if p is not None]  # pins the storages
        before = layer.g
        layer.prepare(T, N)                  # re-blocks only for a new geometry
        if key != self.key and layer.g is before:
            layer.load_weights()
        self.key = key
        return layer


def _set_weights(layer, w_ih, w_hh, b_ih, b_hh):
    """The layer's f32 weights from the parameters (views for f32 tensors)."""
    f32 = [None if p is None else _array(p.to(torch.float32)) for p in (w_ih, w_hh, b_ih, b_hh)]
    layer.w_ih, layer.w_hh = f32[0], f32[1]
    layer.b = (np.zeros(w_ih.shape[0], np.float32) if b_ih is None
               else (f32[2] + f32[3]).astype(np.float32))


_caches = weakref.WeakKeyDictionary()  # module -> _LayerCache (kept off the module: it pickles)


class _LSTMFunction(torch.autograd.Function):
    """One LSTM layer over x [T, N, C]: lstm.LSTM's forward and backward."""

    @staticmethod
    def forward(ctx, cache, x, h0, c0, w_ih, w_hh, b_ih, b_hh):
        dtype = _dtype("input", x, ("h_0", h0), ("c_0", c0), ("weight_ih_l0", w_ih),
                       ("weight_hh_l0", w_hh), ("bias_ih_l0", b_ih), ("bias_hh_l0", b_hh))
        (T, N, C), K = x.shape, w_hh.shape[1]
        ctx.save_for_backward(x, h0, c0, w_ih, w_hh, b_ih, b_hh)
        ctx.dtype, ctx.cache = dtype, cache
        with cache.lock:  # (y, hT and cT are the calling thread's arrays: lstm.LSTM's pools)
            layer = cache.layer_for(dtype, C, K, (w_ih, w_hh, b_ih, b_hh), T, N)
            y, (hT, cT) = layer.forward(_array(x), _array(h0), _array(c0))
            ctx.owner = cache.owner = object()  # this forward's state is in the layer until then
        return _tensor(y), _tensor(hT), _tensor(cT)

    @staticmethod
    @once_differentiable  # our backward is not itself differentiable: say so
    def backward(ctx, dy, dhT, dcT):
        # unpacked before the lock: under torch.utils.checkpoint unpacking runs
        # this module's forward again (which takes the lock)
        saved = ctx.saved_tensors
        with ctx.cache.lock:
            return _LSTMFunction._backward(ctx, saved, dy, dhT, dcT)

    @staticmethod
    def _backward(ctx, saved, dy, dhT, dcT):
        x, h0, c0, w_ih, w_hh, b_ih, b_hh = saved
        cache = ctx.cache
        if cache.owner is ctx.owner:
            layer = cache.layer
            cache.owner = None               # a second backward (retain_graph) recomputes
        else:                                # another forward overwrote the state: redo ours
            layer = lstm.LSTM(x.shape[2], w_hh.shape[1], dtype=ctx.dtype, init=False)
            _set_weights(layer, w_ih, w_hh, b_ih, b_hh)
            layer.forward(_array(x), _array(h0), _array(c0))
        need = ctx.needs_input_grad
        dx, dh0, dc0 = layer.backward(*(_array(d.to(x.dtype)) for d in (dy, dhT, dcT)),
                                      plain_grads=need[4] or need[5], need_dx=need[1],
                                      need_dw=any(need[4:8]))
        db = _cast(layer.grad_b, w_ih) if b_ih is not None and (need[6] or need[7]) else None
        return (None, _tensor(dx) if need[1] else None, _tensor(dh0) if need[2] else None,
                _tensor(dc0) if need[3] else None,
                _cast(layer.grad_w_ih, w_ih) if need[4] else None,
                _cast(layer.grad_w_hh, w_hh) if need[5] else None,
                db if need[6] else None, db if need[7] else None)


class LSTM(nn.LSTM):
    """torch.nn.LSTM (same arguments and parameters) computed by lstm: one layer,
    one direction, no projection (else ValueError); batch_first, bias, unbatched
    input and (h_0, c_0) as torch's. PackedSequence input is not supported."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        reason = _lstm_unsupported(self)
        if reason:
            raise ValueError(reason)

    def _load_from_state_dict(self, *args, **kwargs):
        """As nn.LSTM's, and also where load_state_dict swaps the parameters in
        place (torch.__future__.set_swap_module_params_on_conversion(True)):
        torch.utils.swap_tensors refuses the weak references nn.LSTM keeps
        (_flat_weight_refs, remade after, as nn.LSTM's _apply does)."""
        self._flat_weight_refs = []
        try:
            return super()._load_from_state_dict(*args, **kwargs)
        finally:
            self._init_flat_weights()

    def reload_weights(self):
        """Rebuild the blocked weights on the next call (after writes that bypass
        torch's version counter: `.data`, NumPy views)."""
        _caches.pop(self, None)

    @_not_traced
    def forward(self, input, hx=None):
        if isinstance(input, nn.utils.rnn.PackedSequence):
            raise TypeError("input: PackedSequence is not supported by primitives.nn.LSTM")
        _dtype("input", input)
        if input.dim() not in (2, 3):
            raise ValueError(f"input: expected 2 or 3 dimensions, got shape {tuple(input.shape)}")
        if input.shape[-1] != self.input_size:
            raise ValueError(f"input: expected last dimension {self.input_size} (input_size), "
                             f"got shape {tuple(input.shape)}")
        unbatched = input.dim() == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first
                                                   else input)
        T, N, K = x.shape[0], x.shape[1], self.hidden_size
        if T == 0:
            raise ValueError(f"input: an empty sequence, shape {tuple(input.shape)}")
        amp = _autocast(input)
        if N == 0 or amp is False:
            # no sequences (as for empty sizes in Linear and Conv2d), or
            # torch.autocast to a dtype we do not run: torch's own
            return super().forward(input, hx)
        if hx is None:
            h0 = c0 = x.new_zeros(N, K)
        else:
            want = (1, K) if unbatched else (1, N, K)
            for name, s in zip(("h_0", "c_0"), hx):
                if tuple(s.shape) != want:
                    raise ValueError(f"{name}: expected shape {want}, got {tuple(s.shape)}")
            h0, c0 = (s.reshape(N, K) for s in hx)
        cache = _caches.setdefault(self, _LayerCache())
        args = (x.contiguous(), h0, c0, self.weight_ih_l0, self.weight_hh_l0,
                getattr(self, "bias_ih_l0", None), getattr(self, "bias_hh_l0", None))
        if amp:  # torch.autocast to bf16: the layer in bf16, as torch's
            args = _autocast_args(amp, *args)
        y, hT, cT = _LSTMFunction.apply(cache, *args)
        if unbatched:
            return y.squeeze(1), (hT, cT)
        return (y.transpose(0, 1) if self.batch_first else y), (hT.unsqueeze(0), cT.unsqueeze(0))
