"""Torch tensors as the primitives' NumPy arrays and back, without copies where
the memory allows (float32 through Tensor.numpy(), bfloat16 through an int16
view read as ml_dtypes.bfloat16): what every module of primitives.nn calls.
Their forwards are kept out of torch.compile's tracing (_not_traced), and
follow torch.autocast (_autocast, _autocast_args) and channels-last memory
(_channels_last) as torch's modules do."""
import functools

import numpy as np
import torch
from torch.autograd import forward_ad as _forward_ad

from brgemm import dtypes
from primitives import reuse


_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16"}


# ---------------------------------------------------------------- tensors <-> arrays

def _dtype(name, t, *others):
    """"f32" or "bf16" for a CPU tensor t; the other tensors (None allowed) must match."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise TypeError(f"{name}: expected a CPU tensor, got one on {t.device}")
    if t.dtype not in _DTYPES:
        raise TypeError(f"{name}: expected dtype torch.float32 or torch.bfloat16, got {t.dtype}")
    for other_name, o in others:
        if o is not None and (o.dtype != t.dtype or o.device != t.device):
            raise TypeError(f"{other_name}: expected {t.dtype} on {t.device} like {name}, "
                            f"got {o.dtype} on {o.device}")
    for n, o in ((name, t),) + tuple(others):
        if o is not None and o.layout != torch.strided:  # (sparse, mkldnn)
            raise TypeError(f"{n}: expected a dense tensor, got layout {o.layout} (the "
                            f"primitives read strided memory: call .to_dense() first)")
    return _DTYPES[t.dtype]


def _array(t):
    """The NumPy view of a tensor's memory (a contiguous copy first if it is strided)."""
    t = t.detach().resolve_neg()  # (a negated view: Tensor.numpy() refuses it)
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(dtypes.bfloat16)
    return t.numpy()


def _graphed(t):
    """Whether a module's call on t is being traced into a graph (torch.compile,
    torch.export, or torch.fx.symbolic_trace, which hands forward a Proxy):
    then it calls the custom operators (primitives.nn_ops), which a graph
    holds as one node each."""
    return torch.compiler.is_compiling() or isinstance(t, torch.fx.Proxy)


def _untracked(*ts):
    """Whether no autograd can see a call on tensors ts (None allowed, and
    anything else the call itself refuses by name): grad mode off or none
    of them requiring grad, and neither forward-mode AD (a dual level) nor
    a torch.func transform active. Such a call may run
    its primitive directly, without the autograd Function around it (some
    10 us a call: a small layer's inference costs several times its
    product); anything else keeps the Function, whose missing jvp raises
    where forward-mode AD asks for one."""
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                       for t in ts):
        return False
    return getattr(_forward_ad, "_current_level", 0) < 0 and not _transformed()


def _transformed():
    """Whether a torch.func transform (grad, vjp, vmap, ...) is active: its
    tensors may be functorch's wrappers, which have no memory to view."""
    return torch._C._are_functorch_transforms_active()


def _vmapped():
    """Whether a torch.func.vmap is active, at any level of the transforms
    (where torch's private interpreter stack is not there to ask: whether
    any transform is, erring towards the answer that is safe under vmap)."""
    if not _transformed():
        return False
    try:
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters
        vmap = torch._C._functorch.TransformType.Vmap
    except (ImportError, AttributeError):
        return True
    return any(i.key() == vmap for i in retrieve_all_functorch_interpreters())


def _tensor(a):
    """A tensor over array a's memory (no copy)."""
    if a.dtype == dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _kept(weight, below=0):
    """reuse= for a weight tensor: kept while its version counter stands still.
    Inference tensors (made under torch.inference_mode) have no counter, so
    nothing proves them unchanged: re-blocked on every call. So are weights
    of fewer than `below` elements, whose blocking costs less than proving
    them unchanged (and a call without reuse= is remembered whole)."""
    return None if weight.is_inference() or weight.numel() < below else reuse.tensors(weight)


def _cast(a, like):
    """Array a as a tensor of like's dtype (a copy only if the dtypes differ)."""
    return _tensor(a).to(like.dtype)


def _channels_last(t):
    """Whether t is a 4-d tensor in channels-last memory (and not also contiguous)."""
    return (isinstance(t, torch.Tensor) and t.dim() == 4 and not t.is_contiguous()
            and t.is_contiguous(memory_format=torch.channels_last))


def _autocast(t, devices=None):
    """What torch.autocast asks of a linear, convolution or LSTM on tensor t:
    None where it is off for t's device (or t is no floating tensor);
    torch.bfloat16 where it asks for bf16 (on one of `devices`; None: any),
    which our primitives compute on the arguments _autocast_args casts; False
    where it asks for something else, which torch's own functions must run."""
    if not (isinstance(t, torch.Tensor) and t.is_floating_point()
            and torch.is_autocast_enabled(t.device.type)):
        return None
    ours = devices is None or t.device.type in devices
    return torch.bfloat16 if ours and torch.get_autocast_dtype(t.device.type) == \
        torch.bfloat16 else False


def _autocast_args(dtype, *tensors):
    """tensors (None kept) as autocast hands them to an op computed in dtype:
    each floating one cast to it, float64 ones excepted as torch's autocast
    does (our primitives then refuse them, as outside autocast); autograd
    carries gradients back through the casts, to float32 parameters in float32."""
    return [t.to(dtype) if t is not None and t.is_floating_point()
            and t.dtype not in (dtype, torch.float64) else t for t in tensors]


def _not_traced(forward):
    """forward, run as it is under torch.compile (a graph break around each
    call): dynamo cannot trace the primitives (NumPy, cffi) and failed inside
    its own guards on them. Costs torch._dynamo's import (about 1.5 s, which
    a torch.optim step pays anyway) and some microseconds a call. torch.export
    can make no graph break: it is refused by name (NotImplementedError), as
    are torch.fx.symbolic_trace, which hands forward Proxies, and torch.func's
    transforms, whose wrapped tensors the kept state cannot hold."""
    @functools.wraps(forward)
    def checked(self, *args, **kwargs):
        if torch.compiler.is_exporting():
            raise NotImplementedError(
                f"{type(self).__name__}: torch.export cannot hold this forward (it keeps "
                f"state in the module and runs outside a graph); export Linear, Conv2d or "
                f"MLP(fused=False) only")
        if _transformed():
            raise NotImplementedError(
                f"{type(self).__name__}: torch.func transforms (grad, vjp, vmap, ...) cannot "
                f"run this forward (it keeps state in the module); Linear, Conv2d and "
                f"MLP(fused=False) run under them")
        if any(isinstance(a, torch.fx.Proxy) for a in args + tuple(kwargs.values())):
            raise NotImplementedError(
                f"{type(self).__name__}: torch.fx.symbolic_trace cannot trace this forward "
                f"(it keeps state in the module); trace with a torch.fx.Tracer whose "
                f"is_leaf_module says True for it, so the graph calls the module whole")
        return forward(self, *args, **kwargs)
    return torch.compiler.disable(checked)


class _KeptCopies:
    """Linear's and Conv2d's _apply (Module.to(), .float(), ...) and
    load_state_dict let every kept blocked copy go first (reuse.clear()):
    with torch.__future__.set_swap_module_params_on_conversion(True) (or
    tensor subclass parameters) they swap each parameter in place, which
    torch.utils.swap_tensors refuses while a copy refers to it (weakly)."""

    def _apply(self, fn, recurse=True):
        reuse.clear()
        return super()._apply(fn, recurse)

    def _load_from_state_dict(self, *args, **kwargs):
        reuse.clear()
        return super()._load_from_state_dict(*args, **kwargs)
