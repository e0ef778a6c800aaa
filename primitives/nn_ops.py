"""Linear's and Conv2d's computations on torch tensors (fc and conv on the
tensors' memory), in two forms that share them:

    linear_rows, linear_grads, conv_out, conv_grads
        the forward and the gradients, as the eager autograd Functions
        (nn._LinearFunction, nn_conv._Conv2dFunction) run them;
    torch.ops.brgemm.linear, .linear_backward, .conv2d, .conv2d_backward
        the same as PyTorch custom operators (torch.library), with shape
        functions and autograd formulas: what Linear and Conv2d call while
        torch.compile or torch.export traces them. A graph holds each as one
        opaque node, so a compiled model has no graph break at our layers and
        inductor fuses the work around them; an exported program names them.

Eager calls keep the Functions: a custom operator's dispatch costs some tens of
microseconds more a call, which tiny layers would feel. Backward passes are not
differentiable again in either form."""
import math
from typing import List, Optional, Tuple

import torch
from torch.autograd import forward_ad as _forward_ad

from primitives import conv, fc
from primitives.nn_tensors import _array, _cast, _dtype, _kept, _tensor

Tensor = torch.Tensor
# Linear's weights of fewer elements are blocked on every call rather than
# kept (nn_tensors._kept): a call without reuse= is remembered whole, and the
# modules ran faster so up to 512 x 256 weights, slower (inference) at
# 1024 x 256 (benchmarks/RESULTS.md, forty-second session)
FC_REBLOCKED_BELOW = 1 << 18


# ---------------------------------------------------------------- Linear

def linear_rows(x, weight, bias):
    """x W^T + b over x's last axis, as rows [x's rows, K] (a view made here,
    x's shape, could not be written in place after: the module reshapes)."""
    dtype = _dtype("input", x, ("weight", weight), ("bias", bias))
    K, C = weight.shape
    if x.shape[-1:] != (C,):
        raise ValueError(f"input: expected last dimension {C} (in_features), got shape "
                         f"{tuple(x.shape)}")
    rows = x.reshape(x.shape[:-1].numel(), C)  # (-1: ambiguous where C is 0)
    if 0 in rows.shape or K == 0:  # nothing for the primitive: torch's own, as nn.Linear
        return torch.nn.functional.linear(rows, weight, bias)
    return _tensor(fc.forward(_array(rows), _array(weight),
                              None if bias is None else _array(bias), dtype=dtype,
                              reuse=_kept(weight, FC_REBLOCKED_BELOW)))


def linear_grads(dy, x, weight, bias, need_x, need_w, need_b):
    """(dx, dW, db) of linear_rows for dy [rows, K], each None where not needed:
    what autograd wants no gradient of (a first layer's input, frozen weights)
    is not computed."""
    K, C = weight.shape
    rows = x.reshape(x.shape[:-1].numel(), C)
    need_b = need_b and bias is not None
    if 0 in rows.shape or K == 0:  # empty sizes: torch's own products (zeros, or db)
        dy = dy.to(x.dtype)
        return ((dy @ weight).reshape(x.shape) if need_x else None,
                dy.t() @ rows if need_w else None, dy.sum(0) if need_b else None)
    dx, dw, db = fc.backward(_array(dy.to(x.dtype)), _array(rows), _array(weight),
                             dtype=_dtype("input", x), reuse=_kept(weight, FC_REBLOCKED_BELOW),
                             need_dx=need_x, need_dw=need_w)
    return (_tensor(dx).reshape(x.shape) if need_x else None,
            _cast(dw, weight) if need_w else None, _cast(db, bias) if need_b else None)


# ---------------------------------------------------------------- Conv2d

def conv_out(x, weight, bias, stride, padding):
    """F.conv2d(x, weight, bias, stride, padding) for x [N, C, H, W]."""
    dtype = _dtype("input", x, ("weight", weight), ("bias", bias))
    if x.dim() != 4 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"input: expected shape (N, {weight.shape[1]}, H, W), got "
                         f"{tuple(x.shape)}")
    if 0 in x.shape or 0 in weight.shape:  # nothing for the primitive: torch's own
        return torch.nn.functional.conv2d(x, weight, bias, stride, padding)
    # the bias is added to each tile of y in the plan, not in a pass of its own
    return _tensor(conv.forward(_array(x), _array(weight), stride, padding, dtype=dtype,
                                reuse=_kept(weight), b=None if bias is None else _array(bias)))


def conv_grads(dy, x, weight, bias, stride, padding, need_x, need_w, need_b):
    """(dx, dW, db) of conv_out for dy [N, K, P, Q], each None where not needed."""
    dy = dy.to(x.dtype)
    need_b = need_b and bias is not None
    if 0 in x.shape or 0 in weight.shape:  # empty sizes: torch's own gradients
        grad = torch.nn.grad
        return (grad.conv2d_input(x.shape, weight, dy, stride, padding) if need_x else None,
                grad.conv2d_weight(x, weight.shape, dy, stride, padding) if need_w else None,
                dy.sum((0, 2, 3)) if need_b else None)
    dx, dw = conv.backward(_array(dy), _array(x), _array(weight), stride, padding,
                           dtype=_dtype("input", x), reuse=_kept(weight), need_dx=need_x,
                           need_dw=need_w) if need_x or need_w else (None, None)
    # each image's rows summed first: one reduction over (0, 2, 3) ran 1.3-3
    # times slower on bf16 (benchmarks/RESULTS.md, nineteenth session)
    db = dy.flatten(2).sum(2, dtype=torch.float32).sum(0).to(bias.dtype) if need_b else None
    return (_tensor(dx) if need_x else None, _tensor(dw) if need_w else None, db)


# ---------------------------------------------------------------- the custom operators

def _or_empty(grads, like):
    """A custom operator returns tensors: an empty one where a gradient is None."""
    return tuple(like.new_empty(0) if g is None else g for g in grads)


def _fake_grads(x, weight, bias, need_x, need_w, need_b):
    none = x.new_empty(0)  # (as _or_empty)
    return (x.new_empty(x.shape) if need_x else none,
            weight.new_empty(weight.shape) if need_w else none,
            bias.new_empty(bias.shape) if need_b and bias is not None else none)


def _no_forward_ad(op):
    """Refuse a run under forward-mode AD (a dual level open: torch.func.jvp,
    jacfwd, forward_ad): the operators have no forward formula, and torch's
    generated autograd kernel would drop the tangents without a word (zero
    tangents from jvp). The kernel sees plain tensors, so any call inside a
    dual level is refused, dual inputs or not."""
    if getattr(_forward_ad, "_current_level", -1) >= 0:
        raise NotImplementedError(
            f"torch.ops.brgemm.{op}: forward-mode AD (torch.func.jvp, jacfwd, dual tensors) is "
            "not supported (backward() is)")


@torch.library.custom_op("brgemm::linear", mutates_args=())
def _linear(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    _no_forward_ad("linear")
    return linear_rows(x, weight, bias)


@_linear.register_fake
def _(x, weight, bias):
    # (a product of the sizes: Size.numel() made a traced batch a constant)
    return x.new_empty((math.prod(x.shape[:-1]), weight.shape[0]))


@torch.library.custom_op("brgemm::linear_backward", mutates_args=())
def _linear_backward(dy: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor],
                     need_x: bool, need_w: bool, need_b: bool) -> Tuple[Tensor, Tensor, Tensor]:
    _no_forward_ad("linear_backward")
    return _or_empty(linear_grads(dy, x, weight, bias, need_x, need_w, need_b), x)


@_linear_backward.register_fake
def _(dy, x, weight, bias, need_x, need_w, need_b):
    return _fake_grads(x, weight, bias, need_x, need_w, need_b)


@torch.library.custom_op("brgemm::conv2d", mutates_args=())
def _conv2d(x: Tensor, weight: Tensor, bias: Optional[Tensor], stride: List[int],
            padding: List[int]) -> Tensor:
    _no_forward_ad("conv2d")
    return conv_out(x, weight, bias, tuple(stride), tuple(padding))


@_conv2d.register_fake
def _(x, weight, bias, stride, padding):
    P, Q = ((x.shape[2 + i] + 2 * padding[i] - weight.shape[2 + i]) // stride[i] + 1
            for i in range(2))
    return x.new_empty((x.shape[0], weight.shape[0], P, Q))


@torch.library.custom_op("brgemm::conv2d_backward", mutates_args=())
def _conv2d_backward(dy: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor],
                     stride: List[int], padding: List[int], need_x: bool, need_w: bool,
                     need_b: bool) -> Tuple[Tensor, Tensor, Tensor]:
    _no_forward_ad("conv2d_backward")
    return _or_empty(conv_grads(dy, x, weight, bias, tuple(stride), tuple(padding), need_x,
                                need_w, need_b), x)


@_conv2d_backward.register_fake
def _(dy, x, weight, bias, stride, padding, need_x, need_w, need_b):
    return _fake_grads(x, weight, bias, need_x, need_w, need_b)


def _save(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:3])
    ctx.rest = inputs[3:]  # conv2d's stride and padding


def _grads(ctx, got):
    """The operator's gradients for autograd: None where none was wanted."""
    needs = ctx.needs_input_grad
    return tuple(g if need else None for g, need in zip(got, needs)) + (None,) * len(ctx.rest)


def _linear_autograd(ctx, dy):
    x, weight, bias = ctx.saved_tensors
    return _grads(ctx, torch.ops.brgemm.linear_backward(dy, x, weight, bias,
                                                        *ctx.needs_input_grad[:3]))


def _conv2d_autograd(ctx, dy):
    x, weight, bias = ctx.saved_tensors
    return _grads(ctx, torch.ops.brgemm.conv2d_backward(dy, x, weight, bias, *ctx.rest,
                                                        *ctx.needs_input_grad[:3]))


_linear.register_autograd(_linear_autograd, setup_context=_save)
_conv2d.register_autograd(_conv2d_autograd, setup_context=_save)
