"""Eager: the executor that runs each call of a loop nest at once, through
brgemm.Kernel, with the epilogue ops in NumPy: the reference and debugging
path for the nests that brgemm.plan's Recorder records."""
from __future__ import annotations

import numpy as np

from brgemm import dtypes
from brgemm.block import Block
from brgemm.epilogue import COPIES, tap_stride
from brgemm.kernel import Kernel
from brgemm.vnni import unpack_block


def _block_view(flat, offset, rows, cols, ld):
    if offset < 0 or offset + (rows - 1) * ld + cols > flat.size:
        raise ValueError(f"block at offset {offset} ({rows}x{cols}, row stride {ld}) "
                         f"runs past a buffer of {flat.size} elements")
    return np.lib.stride_tricks.as_strided(flat[offset:], (rows, cols), (ld * flat.itemsize,
                                                                        flat.itemsize))


class Eager:
    """Runs each call as the loop nest makes it: the reference and debugging path."""

    def __init__(self, backend=None, **arrays):
        self.backend = backend
        self.arrays = {name: a.reshape(-1) for name, a in arrays.items()}
        self._kernels = {}

    def at(self, phase, task):
        pass  # one thread, nest order: phases and tasks need no bookkeeping

    def _kernel(self, blk, lda, ldb):
        """A kernel of blk's shape, dtype, alpha and beta on rows lda and ldb
        apart (blk's own, or a plain copy's), made once."""
        kern = self._kernels.get((blk, lda, ldb))
        if kern is None:
            kern = self._kernels[blk, lda, ldb] = Kernel(
                blk.m, blk.n, blk.k, dtype=blk.dtype, beta=blk.beta, alpha=blk.alpha,
                backend=self.backend, lda=lda, ldb=ldb)
        return kern

    def gemm(self, blk: Block, a, a_offs, b, b_offs, c, c_off, ops=()):
        for op in ops:  # copy_b, copy_bt, copy_taps, copy_at: operands filled before the call
            taps = op.stride if op.code == "copy_taps" else 1
            if op.code == "copy_at":  # [k][rows] -> A's rows [rows][k]
                _block_view(self.arrays[op.tensors[1]], op.offsets[1], op.stride, blk.k,
                            blk.lda)[...] = _block_view(self.arrays[op.tensors[0]],
                                                        op.offsets[0], blk.k, op.stride, op.ld).T
                continue
            if op.code == "copy_b":
                src = _block_view(self.arrays[op.tensors[0]], op.offsets[0], blk.k, blk.n,
                                  op.ld)[None]
            elif op.code in ("copy_bt", "copy_taps"):  # [n][k][taps] -> [taps][k][n]
                src = _block_view(self.arrays[op.tensors[0]], op.offsets[0], blk.n, blk.k * taps,
                                  op.ld).reshape(blk.n, blk.k, taps).transpose(2, 1, 0)
            else:
                continue
            for q in range(taps):
                _block_view(self.arrays[op.tensors[1]], op.offsets[1] + q * tap_stride(
                    blk.k, blk.ldb), blk.k, blk.n, blk.ldb)[...] = src[q]
        C = _block_view(self.arrays[c], c_off, blk.m, blk.n, blk.ldc)
        if blk.a_t:  # the A blocks transposed into a contiguous stack, through a plain kernel
            A = np.ascontiguousarray(np.stack([_block_view(self.arrays[a], o, blk.k, blk.m,
                                                           blk.lda).T for o in a_offs]))
            self._kernel(blk, blk.k, blk.ldb).offs(
                A, self.arrays[b], [i * blk.m * blk.k for i in range(len(A))], b_offs, C)
        elif blk.b_vnni:  # the plain blocks, through a kernel that reads them so
            # np.stack keeps its inputs' memory order: for k = 2 those views are column-major
            B = np.ascontiguousarray(
                np.stack([unpack_block(self.arrays[b], o, blk.k, blk.n, blk.ldb) for o in b_offs]))
            self._kernel(blk, blk.lda, blk.n).offs(
                self.arrays[a], B, a_offs, [i * blk.k * blk.n for i in range(len(B))], C)
        else:
            self._kernel(blk, blk.lda, blk.ldb).offs(self.arrays[a], self.arrays[b], a_offs,
                                                      b_offs, C)
        for op in ops:
            if op.code not in COPIES:
                self._apply(op, C)

    def _apply(self, op, C):
        if op.code == "bias":
            C += self.arrays[op.tensors[0]][op.offsets[0]:op.offsets[0] + C.shape[1]]
        elif op.code == "bias_rows":
            C += self.arrays[op.tensors[0]][op.offsets[0]:op.offsets[0] + C.shape[0], None]
        elif op.code == "col_sum":
            self.arrays[op.tensors[0]][op.offsets[0]:op.offsets[0] + C.shape[1]] += C.sum(axis=0)
        elif op.code == "relu":
            np.maximum(C, 0, out=C)
        elif op.code == "sigmoid":
            C[...] = 1 / (1 + np.exp(-C))
        elif op.code == "tanh":
            np.tanh(C, out=C)
        elif op.code == "store_bf16":
            dst = _block_view(self.arrays[op.tensors[0]], op.offsets[0], *C.shape, op.ld)
            dst[...] = C.astype(dtypes.bfloat16)
        elif op.code.endswith(("_bwd", "_bwd_bf16")) and op.code != "lstm_cell_bwd":
            y = _block_view(self.arrays[op.tensors[0]], op.offsets[0], *C.shape, op.ld)
            y = y.astype(np.float32)  # a bf16 y (the *_bf16 codes) widened exactly
            C *= {"relu": lambda: y > 0, "sigmoid": lambda: y * (1 - y),
                  "tanh": lambda: 1 - y * y}[op.code.split("_")[0]]()
        elif op.code in ("store_t", "store_t_bf16"):
            dst = _block_view(self.arrays[op.tensors[0]], op.offsets[0], C.shape[1], C.shape[0],
                              op.ld)
            dst[...] = C.T.astype(dtypes.bfloat16 if op.code == "store_t_bf16" else np.float32)
        elif op.code == "copy_rows":
            rows, cols = C.shape[0], op.stride
            _block_view(self.arrays[op.tensors[1]], op.offsets[1], rows, cols, cols)[...] = \
                _block_view(self.arrays[op.tensors[0]], op.offsets[0], rows, cols, op.ld)
        elif op.code == "lstm_cell":
            ldc = C.strides[0] // C.itemsize
            view = lambda q, extra=0: _block_view(  # noqa: E731
                self.arrays[op.tensors[q]], op.offsets[q] + extra, *C.shape, ldc if q == 0 else op.ld)
            sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
            gi, gf, gg, go = (view(0, q * op.stride) for q in range(4))
            gi[...], gf[...], gg[...], go[...] = sig(gi), sig(gf), np.tanh(gg), sig(go)
            view(2)[...] = gf * view(1) + gi * gg
            view(3)[...] = go * np.tanh(view(2))
            if len(op.tensors) > 4:
                view(4)[...] = view(3).astype(dtypes.bfloat16)
        elif op.code == "lstm_cell_bwd":
            blk = lambda q, extra=0: _block_view(  # noqa: E731
                self.arrays[op.tensors[q]], op.offsets[q] + extra, *C.shape, op.ld)
            dh = C + blk(0)
            i, f, g, o = (blk(1, q * op.stride) for q in range(4))
            tc = np.tanh(blk(2))
            dc = blk(4) + dh * o * (1 - tc * tc)
            dgi, dgf, dgg, dgo = (blk(5, q * op.stride) for q in range(4))
            dgo[...] = dh * tc * o * (1 - o)
            dgi[...] = dc * g * i * (1 - i)
            dgg[...] = dc * i * (1 - g * g)
            dgf[...] = dc * blk(3) * f * (1 - f)
            blk(4)[...] = dc * f
            if len(op.tensors) > 6:
                for q in range(4):
                    blk(6, q * op.stride)[...] = blk(5, q * op.stride).astype(dtypes.bfloat16)
        else:
            raise ValueError(f"op: unknown code {op.code!r}")

