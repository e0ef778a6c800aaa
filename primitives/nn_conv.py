"""primitives.nn.Conv2d: torch.nn.Conv2d (groups 1, dilation 1, padding mode
'zeros') whose forward and backward run conv.forward and conv.backward on the
tensors' memory, the bias added by conv's plan. What it does not take is named
by _conv_unsupported (at construction, and again at each call: attributes may
be set after). Under torch.compile and torch.export it calls the custom
operator brgemm::conv2d (primitives.nn_ops) instead of its autograd Function."""
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from primitives import nn_ops, nn_transforms
from primitives.nn_tensors import (_KeptCopies, _autocast, _autocast_args, _channels_last,
                                   _graphed, _untracked, _vmapped)


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
    """F.conv2d(x, w, b, stride, padding) (nn_ops.conv_out): conv.forward /
    conv.backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding):
        ctx.save_for_backward(x, weight, bias)
        ctx.stride, ctx.padding = stride, padding
        return nn_ops.conv_out(x, weight, bias, stride, padding)

    @staticmethod
    @once_differentiable  # our backward is not itself differentiable: say so
    def backward(ctx, dy):
        return nn_ops.conv_grads(dy, *ctx.saved_tensors, ctx.stride, ctx.padding,
                                 *ctx.needs_input_grad[:3]) + (None, None)


class Conv2d(_KeptCopies, nn.Conv2d):
    """torch.nn.Conv2d (same arguments and parameters) computed by conv; groups,
    dilation other than 1 and padding modes other than 'zeros' raise ValueError
    (at construction, or at the call where they were set after)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        reason = _conv_unsupported(self)
        if reason:
            raise ValueError(reason)

    def forward(self, input):
        reason = _conv_unsupported(self)  # (attributes set after construction: a
        if reason:                        # dilation set in place ran as 1)
            raise ValueError(reason)
        unbatched = isinstance(input, torch.Tensor) and input.dim() == 3
        x, weight, bias = input.unsqueeze(0) if unbatched else input, self.weight, self.bias
        amp = _autocast(input, ("cpu",))  # under torch.autocast: bf16 on the CPU ours
        if amp is False:
            return super().forward(input)
        if amp:
            x, weight, bias = _autocast_args(amp, x, weight, bias)
        stride, padding = tuple(self.stride), _conv_padding(self)
        # traced: the custom operator; else the Function (under torch.func's
        # transforms, nn_transforms'), or where no autograd can see the call,
        # the product alone
        y = (torch.ops.brgemm.conv2d(x, weight, bias, list(stride), list(padding))
             if _graphed(input)
             else nn_ops.conv_out(x, weight, bias, stride, padding)
             if _untracked(x, weight, bias)
             else nn_transforms.Conv2dFunction.apply(x, weight, bias, stride, padding)
             if nn_transforms.active()
             else _Conv2dFunction.apply(x, weight, bias, stride, padding))
        # as torch's conv2d answers; not under vmap (at any level), where torch
        # can neither query nor set a member's memory format (NYI: it raised
        # on channels-last inputs or weights, and inputs batched inside)
        if not _vmapped() and (_channels_last(x) or _channels_last(self.weight)):
            y = y.contiguous(memory_format=torch.channels_last)
        return y.squeeze(0) if unbatched else y
