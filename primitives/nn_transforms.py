"""Linear and Conv2d under torch.func's transforms (grad, vjp, jacrev, vmap and
their compositions: per-sample gradients as vmap(grad(...)), model ensembles
as vmap over stacked parameters): the Functions the modules call while a
transform is active (LinearFunction, Conv2dFunction).

functorch runs a Function's forward on the tensors of the level below its
own, and its backward on that level's gradients, which are functorch's
wrapped tensors wherever a vmap sits below (jacrev, per-sample gradients):
no NumPy view can be taken of those. So these backwards call the gradients
through Functions of their own (LinearGrads, Conv2dGrads), and every one of
them has a vmap rule, which meets plain tensors and the batch's dimensions:
  - a forward whose weights the batch shares (vmap over inputs) runs once,
    the batch folded into x's rows (Linear) or images (Conv2d), and so does
    such a batch's dx (per-sample gradients, jacrev);
  - anything else (batched weights: ensembles; each member's dW and db)
    runs once per member of the batch, the results stacked.
Forward-mode AD (jvp, jacfwd) stays refused: the Functions have no jvp.
Gradients are not differentiable again (a grad of a grad raises)."""
import torch

from primitives import nn_ops
from primitives.nn_tensors import _transformed as active
from primitives.nn_tensors import _untracked


def _live(ts):
    """ts, each functorch wrapper of a transform already left (a vjp's
    function called after vjp returned: its saved tensors) unwrapped."""
    unwrap = getattr(torch._C._functorch, "unwrap_if_dead", lambda t: t)  # (private API)
    return [unwrap(t) if isinstance(t, torch.Tensor) else t for t in ts]


def _member(a, dim, i):
    """Member i of a batched tensor (of an empty batch: zeros of a member's
    shape); anything else as it is (a tuple argument such as a stride has a
    tuple of None dimensions)."""
    if not (isinstance(a, torch.Tensor) and isinstance(dim, int)):
        return a
    return a.select(dim, i) if a.shape[dim] else a.new_zeros(a.shape[:dim] + a.shape[dim + 1:])


def _runner(apply, direct, args):
    """direct where it may stand in for apply (per_member), else apply."""
    tensors = (a for a in args if isinstance(a, torch.Tensor))
    return direct if direct is not None and _untracked(*tensors) else apply


def per_member(apply, info, in_dims, args, direct=None):
    """vmap's rule for any Function: apply(*member's args) for each member of
    the batch, its tensors stacked on dimension 0 (non-tensors passed as they
    are, dimension None); direct(*member's args) instead where no autograd
    nor transform can see the members (nn_tensors._untracked: the usual case
    under vmap(grad), whose grad sits above), which spares each member
    torch's argument binding of a Function's apply. An empty batch (vmap over
    size 0, as torch's own operators take) runs one member of zeros: its
    results' shapes give the empty stack's."""
    n = info.batch_size
    apply = _runner(apply, direct, args)
    outs = [apply(*(_member(a, d, i) for a, d in zip(args, in_dims))) for i in range(max(n, 1))]
    if isinstance(outs[0], tuple):
        return tuple(torch.stack(o)[:n] for o in zip(*outs)), (0,) * len(outs[0])
    return torch.stack(outs)[:n], 0


def _not_twice(what):
    raise RuntimeError(f"primitives.nn: {what}'s gradients are not differentiable again "
                       f"(once_differentiable): no create_graph=True, no grad of grad")


def _folded_dx(apply, info, in_dims, args, fold):
    """dx of every member of the batch in one call (the weights shared): dy's
    and x's batch folded into the primitive's rows or images by fold, then
    unfolded."""
    dy, x = (t.movedim(d, 0) if d is not None else t.expand(info.batch_size, *t.shape)
             for t, d in zip(args[:2], in_dims[:2]))
    return apply(fold(dy), fold(x), *args[2:-3], True, False, False)[0].reshape(x.shape)


def _grads_function(what, grads, fold):
    """A Function computing `grads` (nn_ops.linear_grads or conv_grads: dy, x,
    weight, bias, the rest, need_x, need_w, need_b) as (dx, dW, db), an empty
    tensor for each gradient not needed: what the module's backward calls
    under a transform. Not differentiable again. vmap: where the batch
    shares the weights (per-sample gradients, jacrev), dx in one call on
    the folded batch (fold: a batch of dy or x as one of the primitive's),
    dW and db per member (each member's own product); else all per member."""
    class Grads(torch.autograd.Function):
        @staticmethod
        def forward(*args):
            return nn_ops._or_empty(grads(*args), args[1])  # (a Function returns tensors)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, *dgrads):
            _not_twice(what)

        @staticmethod
        def vmap(info, in_dims, *args):
            if not (args[-3] and info.batch_size and in_dims[0] is not None
                    and in_dims[2] is None and in_dims[3] is None):
                return per_member(Grads.apply, info, in_dims, args, direct=Grads.forward)
            dx = _folded_dx(_runner(Grads.apply, Grads.forward, args), info, in_dims, args, fold)
            if not (args[-2] or args[-1]):  # (jacrev by x: nothing per member)
                none = dx.new_empty(info.batch_size, 0)
                return (dx, none, none), (0, 0, 0)
            (_, dw, db), dims = per_member(Grads.apply, info, in_dims,
                                           args[:-3] + (False,) + args[-2:], direct=Grads.forward)
            return (dx, dw, db), dims
    Grads.__name__ = Grads.__qualname__ = f"{what}Grads"
    return Grads


def _fold_rows(t):
    """A batch of Linear's operands as one: all members' rows."""
    return t.reshape(-1, t.shape[-1])


def _fold_images(t):
    """A batch of Conv2d's operands [B, N, ...] as one: all members' images."""
    return t.reshape((-1,) + t.shape[2:])


LinearGrads = _grads_function("Linear", nn_ops.linear_grads, _fold_rows)
Conv2dGrads = _grads_function("Conv2d", nn_ops.conv_grads, _fold_images)


def _backward(ctx, dy, function):
    """A module's gradients for autograd (ctx: nn_ops._save's): through
    `function` (LinearGrads, Conv2dGrads), also where the transform is gone
    (vjp's function, called after vjp returned: the saved tensors unwrapped),
    so that a cotangent requiring grad meets the refusal too (computed
    directly, its derivative was silently dropped). Not once_differentiable:
    a grad of these gradients (a nested grad) must reach the Grads
    Function's refusal, where once_differentiable's check let functorch
    answer zeros."""
    tensors = (dy, *ctx.saved_tensors)
    args = (*ctx.rest, *ctx.needs_input_grad[:3])
    return nn_ops._grads(ctx, function.apply(*(tensors if active() else _live(tensors)), *args))


def _shared_weights(in_dims):
    """Whether vmap batches x alone (the weights and bias the same for all)."""
    return in_dims[0] is not None and in_dims[1] is None and in_dims[2] is None


class LinearFunction(torch.autograd.Function):
    """Linear's Function under a transform (nn._LinearFunction's eager twin:
    the same rows, nn_ops.linear_rows; torch binds a new-style Function's
    arguments by inspect.signature on every apply, some 25 us, so eager calls
    keep the other). vmap: shared weights, one call on every member's rows."""

    @staticmethod
    def forward(x, weight, bias):
        return nn_ops.linear_rows(x, weight, bias)

    setup_context = staticmethod(nn_ops._save)

    @staticmethod
    def backward(ctx, dy):
        return _backward(ctx, dy, LinearGrads)

    @staticmethod
    def vmap(info, in_dims, x, weight, bias):
        if _shared_weights(in_dims):
            xs = x.movedim(in_dims[0], 0)
            y = LinearFunction.apply(xs, weight, bias)
            # (each member's rows counted: -1 is ambiguous where y is empty)
            return y.reshape(info.batch_size, xs.shape[1:-1].numel(), y.shape[-1]), 0
        return per_member(LinearFunction.apply, info, in_dims, (x, weight, bias),
                          direct=nn_ops.linear_rows)


class Conv2dFunction(torch.autograd.Function):
    """Conv2d's Function under a transform (nn_conv._Conv2dFunction's twin:
    nn_ops.conv_out on x [N, C, H, W]). vmap: shared weights, one call on
    all members' images."""

    @staticmethod
    def forward(x, weight, bias, stride, padding):
        return nn_ops.conv_out(x, weight, bias, stride, padding)

    setup_context = staticmethod(nn_ops._save)

    @staticmethod
    def backward(ctx, dy):
        return _backward(ctx, dy, Conv2dGrads)

    @staticmethod
    def vmap(info, in_dims, x, weight, bias, stride, padding):
        # (members not [N, C, H, W]: per member, so that the error names a member's shape)
        if _shared_weights(in_dims) and x.dim() == 5:
            xs = x.movedim(in_dims[0], 0)
            y = Conv2dFunction.apply(_fold_images(xs), weight, bias, stride, padding)
            return y.reshape(xs.shape[:2] + y.shape[1:]), 0
        return per_member(Conv2dFunction.apply, info, in_dims, (x, weight, bias, stride, padding),
                          direct=nn_ops.conv_out)
