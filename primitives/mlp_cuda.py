"""fc.MLP(fused=True) on backend="cuda": every layer of a tile of rows in one
kernel launch (kernels/cuda/mlp_fused.cu, launched through brgemm.cuda_mlp).

    x [N, C] -> y [N, K];   h_{l+1} = act_l(h_l @ W_l^T + b_l),  W_l [out_l, in_l]

bf16 operands, f32 accumulation, as the CPU's fused MLP with dtype="bf16"
(hidden activations and dz rounded to bf16). The GPU always fuses all layers:
the pipeline config's depth and tile are the CPU's knobs and are not read here.
Training, two ways (CudaFused.backward_mode; results agree to rounding order):
  "stored"  forward keeps every layer's input h_l (bf16, and y in f32
      where the last activation needs act'(y)); backward walks the layers in
      reverse per tile reading them (no recompute), writes dx and every dz_l^T
      tile, and dW_l = sum over tiles of dz_l^T h_l runs as batch-reduce GEMMs
      of this project's kernel (primitives/mlp_cuda_grads.py), db from the same
      dz in the fused kernel; needs shared memory for the weights only.
  "recompute" (default: faster on the H200, benchmarks/RESULTS.md)  forward
      writes y only; backward recomputes the forward per tile on chip and
      reduces dW, db inside the fused kernel (reads x and dy only; all layers'
      weights, inputs and an f32 dW in one block's shared memory, so shallow
      MLPs only: where it does not fit, "stored" runs).
Both return dx and leave dW and db (f32, summed over the batch in a fixed
order) on each layer as grad_weight, grad_bias.

Arrays: NumPy in, NumPy out (copied to the GPU and back on each call);
PyTorch CUDA tensors in, PyTorch tensors out on that device, nothing copied
(CUDA-graph capturable once a first call has run); brgemm DeviceArrays in,
DeviceArrays out. Gradients come as the kind of array dy is. Weights stay the
layers' f32 arrays on the host (as fc.MLP keeps them): packed to bf16 and
uploaded when they changed.
"""
import numpy as np

from brgemm import dtypes
from brgemm import cuda_mlp as K
from brgemm.cuda_mlp import DeviceArray, from_dlpack
from primitives import mlp_cuda_grads

MODES = ("stored", "recompute")

Unsupported = K.Unsupported


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _check_host(x, name):
    if x.dtype not in (dtypes.float32, dtypes.bfloat16):
        raise TypeError(f"{name}: expected dtype float32 or bfloat16 for dtype='bf16', got {x.dtype}")


def _device_view(x, name):
    """(DeviceArray view of x, kind) for a NumPy array (kind 'numpy', not yet
    copied), a torch CUDA tensor or a DeviceArray."""
    if isinstance(x, np.ndarray):
        _check_host(x, name)
        return None, "numpy"
    if isinstance(x, DeviceArray):
        if x.dtype not in (dtypes.float32, dtypes.bfloat16):
            raise TypeError(f"{name}: expected a float32 or bfloat16 DeviceArray, got {x.dtype}")
        return x, "device"
    if hasattr(x, "__dlpack__"):
        return from_dlpack(x, name), "torch" if _is_torch(x) else "device"
    raise TypeError(f"{name}: expected a numpy.ndarray, a CUDA tensor or a DeviceArray, "
                    f"got {type(x).__name__}")


def _sub(base, offset, shape):
    """A DeviceArray view of `shape` float32 elements of base from element `offset`."""
    return DeviceArray(shape, base.dtype, _address=base.address + offset * base.dtype.itemsize,
                       _owner=base)


class CudaFused:
    """fc.MLP's layers (their f32 weight and bias) run by the fused CUDA kernels.
    forward and backward as mlp.Fused's; raises Unsupported (a ValueError that
    names the argument) for an MLP the kernels cannot take."""

    def __init__(self, layers, dtype, backward_mode="recompute"):
        if backward_mode not in MODES:
            raise ValueError(f"backward_mode: expected one of {', '.join(MODES)}, "
                             f"got {backward_mode!r}")
        self.backward_mode = backward_mode
        if dtype != "bf16":
            raise Unsupported(f"dtype: the fused MLP on 'cuda' computes in bf16 on tensor cores, "
                              f"got {dtype!r}")
        self.layers = layers
        self.sizes = (layers[0].C,) + tuple(layer.K for layer in layers)
        self.acts = tuple(None if layer.activation in (None, "none") else layer.activation
                          for layer in layers)
        self.shape = K.Shape(self.sizes)
        self.saved = self.last = None
        self.dzt = None              # the dz^T tiles the last stored backward wrote
        self._packed = None          # the weights last uploaded (host copy), and their device copy
        self._w = self._b = None
        self._device_weights = None  # (w, b tensors, their views) from load_weights
        # name -> DeviceArray, reused across calls; brgemm.arrays.Buffers' policy (grows, never
        # shrinks), but device memory, which its NumPy slicing and NaN poisoning cannot touch
        self._scratch = {}

    # -- buffers --
    def _buffer(self, name, nbytes):
        buf = self._scratch.get(name)
        if buf is None or buf.nbytes < nbytes:
            buf = self._scratch[name] = DeviceArray((max(nbytes, 1),), np.uint8)
        return buf

    def load_weights(self, weights, biases=None):
        """Use these PyTorch CUDA tensors (W_l [out_l, in_l], b_l [out_l], any float dtype)
        as the weights from now on, packed on the GPU (no host copy): what
        primitives.nn.MLP does per call. The layers' host arrays are then not read."""
        import torch
        L, W = self.shape.L, self.shape.W
        w = torch.zeros((L, W, W), dtype=torch.bfloat16, device=weights[0].device)
        b = torch.zeros((L, W), dtype=torch.float32, device=weights[0].device)
        with torch.no_grad():
            for l, wl in enumerate(weights):
                w[l, :wl.shape[0], :wl.shape[1]] = wl
                if biases is not None:
                    b[l, :wl.shape[0]] = biases[l]
        self._device_weights = (w, b, from_dlpack(w, "weights"), from_dlpack(b, "biases"))

    def _weights(self):
        """Device copies of W [L][W][W] (bf16, zero-padded, 16-byte aligned) and b [L][W] (f32)."""
        if self._device_weights is not None:
            return self._device_weights[2:]
        L, W = self.shape.L, self.shape.W
        w = np.zeros((L, W, W), dtypes.bfloat16)
        b = np.zeros((L, W), np.float32)
        for l, layer in enumerate(self.layers):
            w[l, :layer.K, :layer.C] = layer.weight
            if layer.bias is not None:
                b[l, :layer.K] = layer.bias
        packed = (w.view(np.uint16), b)
        if self._packed is None or not all(np.array_equal(p, q) for p, q in zip(packed, self._packed)):
            self._w, self._b = DeviceArray.from_numpy(w), DeviceArray.from_numpy(b)
            self._packed = packed
        return self._w, self._b

    def _out(self, kind, like, shape, dtype, name):
        """An output of the caller's kind: (what is returned, its DeviceArray view)."""
        if kind == "torch":
            import torch
            t = torch.empty(shape, dtype=torch.float32 if dtype == np.float32 else torch.bfloat16,
                            device=like.device)
            return t, from_dlpack(t, name)
        d = DeviceArray(shape, dtype)
        return d, d

    def _in(self, x, kind, view, name):
        """x on the device: as it is, or copied in (NumPy) to a scratch buffer."""
        if kind != "numpy":
            return view
        x = np.ascontiguousarray(x)
        buf = self._buffer(name, x.nbytes)
        K.copy_in(buf.address, x)
        return DeviceArray(x.shape, x.dtype, _address=buf.address, _owner=buf)

    def _args(self, rows, weights):
        a = K.new_args()
        a.rows, a.layers = rows, self.shape.L
        for i, s in enumerate(self.sizes):
            a.sizes[i] = s
        for l, act in enumerate(self.acts):
            a.act[l] = K.act_code(act)
        w, b = weights
        a.w, a.b = w.address, b.address
        return a

    @staticmethod
    def _bind(args, field, arr, cols):
        """args.<field> = arr's address, with its f32 and pair-access flags."""
        setattr(args, field, arr.address)
        f32 = arr.dtype == dtypes.float32
        setattr(args, f"{field}_f32", int(f32))
        setattr(args, f"{field}_vec", int(cols % 2 == 0 and arr.address % (8 if f32 else 4) == 0))

    def _shape_of(self, x, view, kind, name, cols):
        shape = x.shape if kind == "numpy" else view.shape
        if len(shape) != 2 or shape[1] != cols:
            raise ValueError(f"{name}: expected shape (N, {cols}), got {tuple(shape)}")
        return shape[0]

    # -- passes --
    def stored(self):
        """Does training keep the activations (backward_mode, or recompute does not fit)?"""
        return self.backward_mode == "stored" or self.shape.bwd_warps is None

    def forward(self, x, train=True):
        view, kind = _device_view(x, "x")
        N = self._shape_of(x, view, kind, "x", self.sizes[0])
        if N == 0:
            raise ValueError("x: an empty batch is not supported")
        keep = train and self.stored()
        # recompute reads x again in backward: a fresh device copy per training
        # forward of NumPy input (stored keeps what it needs in h, or reads x)
        dev_x = self._in(x, kind, view, "x_train" if train else "x")
        if train and kind == "numpy":
            self._scratch.pop("x_train")
        dt = dev_x.dtype
        weights = self._weights()
        args = self._args(N, weights)
        self._bind(args, "x", dev_x, self.sizes[0])
        if kind == "numpy":
            ybuf = self._buffer("y", N * self.sizes[-1] * dt.itemsize)
            y_dev = DeviceArray((N, self.sizes[-1]), dt, _address=ybuf.address, _owner=ybuf)
        else:
            y, y_dev = self._out(kind, x, (N, self.sizes[-1]), dt, "y")
        self._bind(args, "y", y_dev, self.sizes[-1])
        saved = dict(N=N, x=dev_x, weights=weights) if train else None
        if keep:
            saved.update(self._keep(args, kind, x, N, dev_x))
        K.forward(self.shape, args, keep=keep)
        if kind == "numpy":
            y = np.empty((N, self.sizes[-1]), dt)
            K.copy_out(y, y_dev.address)
            _sync()
        self.last = N
        self.saved = saved
        return y

    def _keep(self, args, kind, like, N, dev_x):
        """Fresh buffers for what the training forward keeps (h, and yf where the
        last activation needs f32 y), bound in args; the state backward reads."""
        L, W, T = self.shape.L, self.shape.W, K.dzt_rows()
        pad = -(-N // T) * T
        reads_x = (dev_x.dtype == dtypes.bfloat16 and self.sizes[0] == W and N == pad
                   and dev_x.address % 16 == 0)
        h = self._fresh(kind, like, L * pad * W, dtypes.bfloat16)
        yf = self._fresh(kind, like, N * W, np.float32) if self.acts[-1] is not None else None
        args.h, args.rows_pad, args.h_x = h[1].address, pad, int(not reads_x)
        args.yf = yf[1].address if yf is not None else 0
        return dict(h=h, yf=yf, pad=pad, reads_x=reads_x)

    def _fresh(self, kind, like, n, dtype):
        """(owner, DeviceArray) of n fresh elements: from torch's allocator for torch
        callers (fresh per call, and capturable in a CUDA graph), else device memory."""
        if kind == "torch":
            import torch
            t = torch.empty((n,), dtype=torch.float32 if dtype == np.float32 else torch.bfloat16,
                            device=like.device)
            return t, from_dlpack(t, "h")
        d = DeviceArray((n,), dtype)
        return d, d

    def state(self):
        """What backward reads of the last training forward (for backward(state=))."""
        return self.saved

    def backward(self, dy, state=None):
        """dy [N, K] -> dx [N, C] for the last training forward (or `state`)."""
        view, kind = _device_view(dy, "dy")
        saved = state or self.saved
        K_ = self.sizes[-1]
        shape = dy.shape if kind == "numpy" else view.shape
        N = saved["N"] if saved else None
        if saved is None or tuple(shape) != (N, K_):
            raise ValueError(f"dy: expected the training forward's output shape "
                             f"{(N, K_) if saved else '(call forward first)'}, "
                             f"got {tuple(shape)}")
        dev_dy = self._in(dy, kind, view, "dy")
        dt = dev_dy.dtype
        args = self._args(N, saved["weights"])
        self._bind(args, "dy", dev_dy, K_)
        n_w = sum(a * b for a, b in zip(self.sizes[:-1], self.sizes[1:]))
        n_b = sum(self.sizes[1:])
        if kind == "numpy":
            dxbuf = self._buffer("dx", N * self.sizes[0] * dt.itemsize)
            dx_dev = DeviceArray((N, self.sizes[0]), dt, _address=dxbuf.address, _owner=dxbuf)
            gbuf = self._buffer("grads", (n_w + n_b) * 4)
            g_dev = DeviceArray((n_w + n_b,), np.float32, _address=gbuf.address, _owner=gbuf)
        else:
            dx, dx_dev = self._out(kind, dy, (N, self.sizes[0]), dt, "dx")
            grads, g_dev = self._out(kind, dy, (n_w + n_b,), np.float32, "grads")
        self._bind(args, "dx", dx_dev, self.sizes[0])
        args.dw, args.db = g_dev.address, g_dev.address + n_w * 4
        if "h" in saved:
            self._backward_stored(args, saved)
        else:
            self._bind(args, "x", saved["x"], self.sizes[0])
            blocks = K.backward_blocks(self.shape, N)
            args.partial = self._buffer("partial", blocks * self.shape.partial_floats * 4).address
            K.backward(self.shape, args, blocks)
        if kind == "numpy":
            dx = np.empty((N, self.sizes[0]), dt)
            grads = np.empty(n_w + n_b, np.float32)
            K.copy_out(dx, dx_dev.address)
            K.copy_out(grads, g_dev.address)
            _sync()
        at, bat = 0, n_w
        for layer in self.layers:
            n = layer.K * layer.C
            layer._fused_dw = _view(grads, kind, at, (layer.K, layer.C))
            layer.db = _view(grads, kind, bat, (layer.K,))
            at, bat = at + n, bat + layer.K
        return dx

    def _backward_stored(self, args, saved):
        """dx, dz^T tiles and db partials by the fused kernel from the kept h, then
        the dW partials by the plan, then both sums (args: dy, dx, dw, db bound)."""
        L, W, T, pad = self.shape.L, self.shape.W, K.dzt_rows(), saved["pad"]
        h, yf = saved["h"][1], saved["yf"]
        args.h, args.rows_pad = h.address, pad
        args.yf = yf[1].address if yf is not None else 0
        dzt = self.dzt = self._typed("dzt", L * pad * W, dtypes.bfloat16)  # (benchmarks read it)
        args.dzt = dzt.address
        warps = K.stored_warps(self.shape, pad)
        args.partial_db = self._buffer("partial_db", warps * L * W * 4).address
        K.backward_stored(self.shape, args, warps)
        plan, partials = mlp_cuda_grads.plan(L, W, pad, T, K.sm_count(), saved["reads_x"])
        dwp = self._typed("dwp", partials * L * W * W, np.float32)
        t = {"dzt": dzt, "dwp": dwp}
        if "h" in plan.tensors:
            t["h"] = h
        if saved["reads_x"]:
            t["x"] = saved["x"]
        plan.run(backend="cuda", **t)
        args.partial, args.partials, args.stride_w = dwp.address, partials, L * W * W
        K.reduce(self.shape, args)

    def _typed(self, name, n, dtype):
        """A scratch DeviceArray of n elements of dtype (reused across calls)."""
        buf = self._buffer(name, n * np.dtype(dtype).itemsize)
        return DeviceArray((n,), dtype, _address=buf.address, _owner=buf)


def _view(flat, kind, offset, shape):
    n = int(np.prod(shape))
    if kind == "device":
        return _sub(flat, offset, shape)
    return flat[offset:offset + n].reshape(shape) if kind == "numpy" else \
        flat[offset:offset + n].view(*shape)


def _sync():
    K.synchronize()
