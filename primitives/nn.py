"""PyTorch modules whose forward and backward run our primitives (CPU tensors;
MLP(fused=True) also CUDA tensors).

    Linear, Conv2d, LSTM   torch.nn's modules with their forward replaced: same
                           constructor arguments, initialisation, Parameter names
                           and state_dict keys (they are subclasses)
    MLP(sizes, activation) fc.MLP's stack as a torch module of our Linears
                           (fused=True: the stack as one fc.MLP(fused=True) call;
                           on CUDA tensors the fused CUDA kernels, in bf16 with
                           f32 accumulation whatever the tensors' float dtype)
    convert(model)         the model's nn.Linear, nn.Conv2d and single-layer
                           nn.LSTM modules (parametrized ones too) switched to
                           ours in place, their Parameter objects untouched

Each module's forward is a torch.autograd.Function whose forward and backward
call fc, conv and lstm on NumPy views of the tensors' memory: float32 through
Tensor.numpy(), bfloat16 through an int16 view read as ml_dtypes.bfloat16, so a
contiguous tensor is never copied on the way in, and results come back as
tensors over the arrays the primitives returned (the Functions return rows,
reshaped outside them: a view made inside could not be written in place).
Conv2d's bias is added by conv's plan, its gradient summed in torch; the
LSTM's two biases are summed into one, and both get its gradient. Under
torch.compile and torch.export, Linear and Conv2d call custom operators
(torch.library: brgemm::linear, brgemm::conv2d, primitives.nn_ops) that a
graph holds whole; the LSTM's and fused MLP's forwards, which keep state in
the module, are graph breaks (nn_tensors._not_traced). Under torch.func's
transforms (grad, vjp, jacrev, vmap) Linear and Conv2d call the Functions of
primitives.nn_transforms; the LSTM and the fused MLP refuse them by name. Under
torch.autocast to bf16 the modules compute in bf16 on the cast arguments, to
other dtypes torch's own functions run (nn_tensors._autocast). Conv2d is in
primitives.nn_conv, the LSTM in primitives.nn_lstm.

Blocked weights are rebuilt only when a parameter's version counter or storage
changed (every in-place torch op and load_state_dict bump the counter; a
`.data` swapped in, as Module.to() does, is a new storage) or a torch.optim
optimizer has stepped since (fused steps bump no counter): primitives.reuse.
Writes in place through `.data` or a NumPy view are not seen: after those
call `reload_weights()` on an LSTM, `primitives.reuse.clear()` for the others.
Linear (weights of nn_ops.FC_REBLOCKED_BELOW elements or more: smaller ones are
blocked per call) and Conv2d pass `reuse.tensors(weight)` to the functional forms, and
the LSTM keeps one lstm.LSTM layer per module. Its forward saves the state
its backward reads; if another forward ran on the module before that
backward (two calls in one graph), the backward recomputes its own forward
first instead of reading the other's state. The LSTM's layer and the fused
MLP's nets serve one call at a time (a lock: threads calling one module
wait for each other). Empty sizes (no rows, no features, no images, no
sequences) run torch's own functions, as torch.nn's modules do.
Backward passes are not differentiable again (create_graph=True raises).
"""
import threading
import warnings
import weakref

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn.utils import parametrize

from primitives import fc, nn_ops, nn_transforms
from primitives._args import flag
from primitives.nn_conv import Conv2d, _conv_unsupported
from primitives.nn_lstm import LSTM, _lstm_unsupported
from primitives.nn_tensors import (_DTYPES, _KeptCopies, _array, _autocast, _autocast_args,
                                   _cast, _dtype, _graphed, _not_traced, _tensor,
                                   _untracked)

__all__ = ["Linear", "Conv2d", "LSTM", "MLP", "convert"]


# ---------------------------------------------------------------- Linear

class _LinearFunction(torch.autograd.Function):
    """y = x W^T + b over x's last axis, as rows (nn_ops.linear_rows): fc.forward
    / fc.backward; Linear reshapes (a view made here could not be written in
    place after: nn.ReLU(inplace=True))."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight, bias)
        return nn_ops.linear_rows(x, weight, bias)

    @staticmethod
    @once_differentiable  # our backward is not itself differentiable: say so
    def backward(ctx, dy):
        return nn_ops.linear_grads(dy, *ctx.saved_tensors, *ctx.needs_input_grad)


class Linear(_KeptCopies, nn.Linear):
    """torch.nn.Linear (same arguments and parameters) computed by fc."""

    def forward(self, input):
        args = (input, self.weight, self.bias)
        amp = _autocast(input, ("cpu",))  # under torch.autocast: bf16 on the CPU ours
        if amp is False:
            return super().forward(input)
        if amp:
            args = _autocast_args(amp, *args)
        # traced: the custom operator; else the Function (under torch.func's
        # transforms, nn_transforms'), or where no autograd can see the call,
        # the product alone
        y = (torch.ops.brgemm.linear(*args) if _graphed(input)
             else nn_ops.linear_rows(*args) if _untracked(*args)
             else nn_transforms.LinearFunction.apply(*args) if nn_transforms.active()
             else _LinearFunction.apply(*args))
        return y.reshape(input.shape[:-1] + y.shape[-1:])


# MLP module -> {dtype or "cuda": fc.MLP(fused=True), "lock": what its calls take}
_fused_nets = weakref.WeakKeyDictionary()


def _layer_grads(net):
    """net's gradients in its parameters' order: each layer's weight, then its bias."""
    return [g for layer in net.layers
            for g in (layer.grad_weight,) + ((layer.grad_bias,) if layer.bias is not None else ())]


class _FusedMLPFunction(torch.autograd.Function):
    """The whole stack as one fc.MLP(fused=True) call: forward keeps what its
    backward reads (ctx holds it, so two forwards before one backward are fine)."""

    @staticmethod
    def forward(ctx, module, train, x, *params):
        """y as rows (MLP.forward reshapes it, as Linear). params: each layer's
        weight then bias, in layer order, a tensor shared by two layers twice;
        train: keep what backward reads (else an inference forward)."""
        dtype = _dtype("input", x, *zip(module._stack_names(), params))
        per = 2 if module.layers[0].bias is not None else 1
        ctx.lock = module._nets()["lock"]
        with ctx.lock:  # (y, dx: the calling thread's arrays, fc's pools)
            net = module._fused(dtype)
            for layer, i in zip(net.layers, range(0, len(params), per)):
                layer.weight = _array(params[i].float())
                layer.bias = _array(params[i + 1].float()) if per == 2 else None
            y = net.forward(_array(x.reshape(-1, x.shape[-1])), train=train)
            ctx.net, ctx.shape, ctx.params = net, x.shape, params
            ctx.state = net.fused.state() if train else None
        # saved (unread: the state holds what backward reads) for autograd's
        # checks: a parameter changed in place before backward, a second backward
        ctx.save_for_backward(x, *params)
        return _tensor(y)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        net, _ = ctx.net, ctx.saved_tensors  # (raises as torch.nn's would: see forward)
        with ctx.lock:
            dx = net.fused.backward(_array(dy.to(ctx.params[0].dtype)), ctx.state)
            grads = _layer_grads(net)
        return (None, None, _tensor(dx).reshape(ctx.shape),
                *(_cast(g, p) for g, p in zip(grads, ctx.params)))


class _CudaFusedMLPFunction(torch.autograd.Function):
    """The whole stack on CUDA tensors as one fc.MLP(fused=True, backend="cuda")
    call: weights packed on the GPU per call, nothing copied to the host; the
    state (kept activations and weights) is ctx's, as on the CPU."""

    @staticmethod
    def forward(ctx, module, train, x, *params):
        per = 2 if module.layers[0].bias is not None else 1
        ctx.x_dtype, ctx.lock = x.dtype, module._nets()["lock"]
        with ctx.lock:
            net = module._fused_cuda()
            net.fused.load_weights(params[::per], params[1::per] if per == 2 else None)
            y = net.forward(x.detach().reshape(-1, x.shape[-1]).contiguous(), train=train)
            ctx.net, ctx.shape, ctx.params = net, x.shape, params
            ctx.state = net.fused.state() if train else None
        ctx.save_for_backward(x, *params)  # (for autograd's checks, as on the CPU)
        return y  # rows, as on the CPU

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        net, _ = ctx.net, ctx.saved_tensors  # (autograd's CUDA thread: brgemm binds the context)
        with ctx.lock:
            dx = net.fused.backward(dy.to(ctx.x_dtype).contiguous(), ctx.state)
            grads = _layer_grads(net)
        return (None, None, dx.reshape(ctx.shape),
                *(g.to(p.dtype).reshape(p.shape) for g, p in zip(grads, ctx.params)))


_CUDA_DTYPES = (torch.float32, torch.bfloat16)


class MLP(nn.Module):
    """fc.MLP as a torch module: Linear layers of `sizes`, `activation` between
    them and `last_activation` after the last; parameters layers.<i>.weight/bias.
    fused=True runs the whole stack as one fc.MLP(fused=True) per call."""

    ACTIVATIONS = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
                   "none": None, None: None}

    def __init__(self, sizes, activation="relu", last_activation=None, bias=True, device=None,
                 dtype=None, fused=False):
        super().__init__()
        self.fused = flag(fused, "fused")
        sizes = list(sizes)
        if len(sizes) < 2 or not all(isinstance(s, int) and s > 0 for s in sizes):
            raise ValueError(f"sizes: expected at least two positive ints, got {sizes!r}")
        for name, act in (("activation", activation), ("last_activation", last_activation)):
            if act not in self.ACTIVATIONS:
                raise ValueError(f"{name}: expected one of relu, sigmoid, tanh, none, got {act!r}")
        self.sizes, self.activation, self.last_activation = sizes, activation, last_activation
        self.layers = nn.ModuleList(Linear(c, k, bias=bias, device=device, dtype=dtype)
                                    for c, k in zip(sizes[:-1], sizes[1:]))

    def _nets(self):
        """This module's fused nets and the lock their calls take: a net's buffers
        and saved state are one call's at a time (threads calling the module)."""
        nets = _fused_nets.get(self)  # off the module: fc.MLP does not pickle
        return nets if nets is not None else \
            _fused_nets.setdefault(self, {"lock": threading.RLock()})

    def _fused(self, dtype):
        """The fc.MLP(fused=True) that runs this module in `dtype` (weights set per call)."""
        nets = self._nets()
        if dtype not in nets:
            nets[dtype] = fc.MLP(self.sizes, self.activation, self.last_activation,
                                       bias=self.layers[0].bias is not None, dtype=dtype,
                                       fused=True)
        return nets[dtype]

    def _fused_cuda(self):
        """The fc.MLP(fused=True, backend="cuda") that runs this module on CUDA tensors."""
        nets = self._nets()
        if "cuda" not in nets:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                net = fc.MLP(self.sizes, self.activation, self.last_activation,
                             bias=self.layers[0].bias is not None, dtype="bf16", backend="cuda",
                             fused=True)
            if net.fused is None:
                why = "; ".join(str(w.message) for w in caught)
                raise ValueError(f"sizes: the fused MLP cannot run {self.sizes} on CUDA ({why})")
            nets["cuda"] = net
        return nets["cuda"]

    def _stack(self):
        """Each layer's weight, then its bias, in layer order: a tensor two layers
        share comes twice (parameters() would list it once)."""
        return [p for layer in self.layers for p in (layer.weight, layer.bias) if p is not None]

    def _stack_names(self):
        return [f"layers.{i}.{name}" for i, layer in enumerate(self.layers)
                for name in ("weight", "bias") if getattr(layer, name) is not None]

    def forward(self, x):
        if not self.fused:  # our Linears: traced whole under torch.compile
            return self._layers(x, lambda layer, h: layer(h))
        return self._fused_forward(x)

    @_not_traced
    def _fused_forward(self, x):
        """The stack as one fc.MLP(fused=True) call (a graph break: state in the module)."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"input: expected a torch.Tensor, got {type(x).__name__}")
        if x.shape[-1:] != (self.sizes[0],):
            raise ValueError(f"input: expected last dimension {self.sizes[0]} (sizes[0]), "
                             f"got shape {tuple(x.shape)}")
        amp, params = _autocast(x), self._stack()
        if x.numel() == 0 or amp is False:
            # no rows, or autocast to a dtype we do not run: torch's own products
            return self._layers(x, lambda layer, h: nn.functional.linear(h, layer.weight,
                                                                         layer.bias))
        h = x
        if amp:  # torch.autocast to bf16: the stack in bf16, as torch's
            h, *params = _autocast_args(amp, x, *params)
        # where no gradient is wanted (no_grad, inference_mode, frozen), an
        # inference forward: nothing kept for a backward that cannot come
        train = torch.is_grad_enabled() and any(t.requires_grad for t in [h] + params)
        if x.is_cuda:
            for name, t in zip(["input"] + self._stack_names(), [h] + params):
                if not t.is_cuda or t.dtype not in _CUDA_DTYPES:
                    raise ValueError(f"{name}: the fused MLP on CUDA takes float32 or bfloat16 "
                                     f"CUDA tensors, got {t.dtype} on {t.device}")
            y = _CudaFusedMLPFunction.apply(self, train, h, *params)
        else:
            y = _FusedMLPFunction.apply(self, train, h, *params)
        # reshaped here, not in the Function: a view made there cannot be
        # written in place after
        return y.reshape(x.shape[:-1] + y.shape[-1:])

    def _layers(self, x, linear):
        """The stack layer by layer, each layer's product by linear(layer, x)."""
        for i, layer in enumerate(self.layers):
            x = linear(layer, x)
            act = self.ACTIVATIONS[self.activation if i < len(self.layers) - 1
                                   else self.last_activation]
            if act is not None:
                x = act(x)
        return x

    def extra_repr(self):
        return f"sizes={self.sizes}, activation={self.activation!r}"


# ---------------------------------------------------------------- convert

_OURS = {nn.Linear: Linear, nn.Conv2d: Conv2d, nn.LSTM: LSTM}


def _unsupported(m):
    """Why module m (an nn.Linear, nn.Conv2d or nn.LSTM) stays as it was."""
    # recurse: a parametrized module's weights are its parametrizations' `original`s
    for name, p in m.named_parameters():
        if p.device.type != "cpu":
            return f"{name}: on {p.device}, the primitives run on CPU tensors"
        if p.dtype not in _DTYPES:
            return f"{name}: dtype {p.dtype}, the primitives run float32 and bfloat16"
    if isinstance(m, nn.Conv2d):
        return _conv_unsupported(m)
    if isinstance(m, nn.LSTM):
        return _lstm_unsupported(m)
    return None


def _parametrized(m, base):
    """Whether m's class is the one torch.nn.utils.parametrize made over `base`
    (weight_norm, spectral_norm, ...): its forward is base's, its weights
    properties of the class."""
    cls = type(m)
    return (cls.__bases__ == (base,) and cls.__name__ == f"Parametrized{base.__name__}"
            and parametrize.is_parametrized(m))


def _ours_for(m, base):
    """Our class for m, an exact `base` or a parametrized one: then the same
    class over ours (remove_parametrizations goes back to its base: ours)."""
    if type(m) is base:
        return _OURS[base]
    body = {k: v for k, v in vars(type(m)).items() if k not in ("__dict__", "__weakref__")}
    return type(type(m).__name__, (_OURS[base],), body)


def convert(model):
    """model with its nn.Linear, nn.Conv2d and nn.LSTM modules computed by our
    primitives, in place: each module becomes an instance of our subclass and
    keeps its Parameters, buffers, hooks and parametrizations. Modules we
    cannot run (grouped or dilated convolutions, other padding modes, stacked,
    bidirectional or projected LSTMs, other dtypes or devices, subclasses of
    those types whose forward may differ) stay as they were; they are listed,
    as (path, reason) pairs, in model.unconverted and in a warning. Modules
    already ours (and subclasses of ours) are left alone."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    unconverted = []
    for path, m in model.named_modules():
        base = next((b for b in _OURS if isinstance(m, b)), None)
        if base is None or isinstance(m, tuple(_OURS.values())):
            continue
        if type(m) is not base and not _parametrized(m, base):
            unconverted.append((path, f"{type(m).__name__} subclasses torch.nn."
                                      f"{base.__name__}; its forward may differ"))
            continue
        reason = _unsupported(m)
        if reason:
            unconverted.append((path, reason))
        else:
            m.__class__ = _ours_for(m, base)
    model.unconverted = unconverted
    if unconverted:
        warnings.warn("primitives.nn.convert left these modules as they were: " + "; ".join(
            f"{path or '(the model)'}: {reason}" for path, reason in unconverted), stacklevel=2)
    return model
