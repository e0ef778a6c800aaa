"""primitives.nn.Conv2d: torch.nn.Conv2d (groups 1, dilation 1, padding mode
'zeros') whose forward and backward run conv.forward and conv.backward on the
tensors' memory, the bias added by conv's plan. What it does not take is named
by _conv_unsupported (at construction, and again at each call: attributes may
be set after)."""
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from primitives import conv
from primitives.nn_tensors import (_KeptCopies, _array, _autocast, _autocast_args,
                                   _channels_last, _dtype, _kept, _not_traced, _tensor)


def _conv_padding(m):
    """m's padding as a pair, or a reason it is not one we can run."""
    if m.padding == "valid":
        return (0, 0)
    if m.padding == "same":  # torch pads (k - 1) in total: even kernels pad unevenly
        if any(k % 2 == 0 for k in m.kernel_size):
            return (f"padding: 'same' with the even kernel size {m.kernel_size} pads one side "
                    f"more than the other, which the primitive cannot")
        return tuple(k // 2 for k in m.kernel_size)
    return tuple(m.padding)


def _conv_unsupported(m):
    """Why conv cannot run nn.Conv2d module m (None if it can)."""
    if m.groups != 1:
        return f"groups: only groups=1 is supported, got {m.groups}"
    if tuple(m.dilation) != (1, 1):
        return f"dilation: only dilation=1 is supported, got {tuple(m.dilation)}"
    if m.padding_mode != "zeros":
        return f"padding_mode: only 'zeros' is supported, got {m.padding_mode!r}"
    padding = _conv_padding(m)
    return padding if isinstance(padding, str) else None


class _Conv2dFunction(torch.autograd.Function):
    """F.conv2d(x, w, b, stride, padding): conv.forward / conv.backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding):
        dtype = _dtype("input", x, ("weight", weight), ("bias", bias))
        if x.dim() != 4 or x.shape[1] != weight.shape[1]:
            raise ValueError(f"input: expected shape (N, {weight.shape[1]}, H, W), got "
                             f"{tuple(x.shape)}")
        ctx.save_for_backward(x, weight, bias)
        ctx.dtype, ctx.stride, ctx.padding = dtype, stride, padding
        if 0 in x.shape or 0 in weight.shape:  # nothing for the primitive: torch's own
            return torch.nn.functional.conv2d(x, weight, bias, stride, padding)
        # the bias is added to each tile of y in the plan, not in a pass of its own
        return _tensor(conv.forward(_array(x), _array(weight), stride, padding, dtype=dtype,
                                    reuse=_kept(weight),
                                    b=None if bias is None else _array(bias)))

    @staticmethod
    @once_differentiable  # our backward is not itself differentiable: say so
    def backward(ctx, dy):
        x, weight, bias = ctx.saved_tensors
        dy = dy.to(x.dtype)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        if 0 in x.shape or 0 in weight.shape:  # empty sizes: torch's own gradients
            grad = torch.nn.grad
            return (grad.conv2d_input(x.shape, weight, dy, ctx.stride, ctx.padding)
                    if need_x else None,
                    grad.conv2d_weight(x, weight.shape, dy, ctx.stride, ctx.padding)
                    if need_w else None, dy.sum((0, 2, 3)) if need_b else None, None, None)
        # what autograd wants no gradient of is not computed: a first layer's
        # input, frozen weights
        dx, dw = conv.backward(_array(dy), _array(x), _array(weight), ctx.stride, ctx.padding,
                               dtype=ctx.dtype, reuse=_kept(weight), need_dx=need_x,
                               need_dw=need_w) if need_x or need_w else (None, None)
        # each image's rows summed first: one reduction over (0, 2, 3) ran 1.3-3
        # times slower on bf16 (benchmarks/RESULTS.md, nineteenth session)
        db = dy.flatten(2).sum(2, dtype=torch.float32).sum(0).to(bias.dtype) if need_b else None
        return (_tensor(dx) if need_x else None, _tensor(dw) if need_w else None, db, None, None)


class Conv2d(_KeptCopies, nn.Conv2d):
    """torch.nn.Conv2d (same arguments and parameters) computed by conv; groups,
    dilation other than 1 and padding modes other than 'zeros' raise ValueError
    (at construction, or at the call where they were set after)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        reason = _conv_unsupported(self)
        if reason:
            raise ValueError(reason)

    @_not_traced
    def forward(self, input):
        reason = _conv_unsupported(self)  # (attributes set after construction: a
        if reason:                        # dilation set in place ran as 1)
            raise ValueError(reason)
        unbatched = isinstance(input, torch.Tensor) and input.dim() == 3
        x, weight, bias = input.unsqueeze(0) if unbatched else input, self.weight, self.bias
        amp = _autocast(input)
        if amp is not None:  # under torch.autocast: bf16 on the CPU ours, else torch's own
            if amp != torch.bfloat16 or input.device.type != "cpu":
                return super().forward(input)
            x, weight, bias = _autocast_args(amp, x, weight, bias)
        y = _Conv2dFunction.apply(x, weight, bias, tuple(self.stride), _conv_padding(self))
        if _channels_last(x) or _channels_last(self.weight):  # as torch's conv2d answers
            y = y.contiguous(memory_format=torch.channels_last)
        return y.squeeze(0) if unbatched else y
