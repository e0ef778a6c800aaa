"""The fused-MLP kernels on CUDA (kernels/cuda/mlp_fused.cu) as brgemm offers
them to primitives: the one public door to what brgemm.backend._cuda_mlp
launches and to the device arrays and copies it works on, so primitives never
reach into brgemm.backend (data flows primitives -> brgemm -> kernels).

    Shape(sizes)                   the padded widths and what the kernels can take
                                   (raises Unsupported, a ValueError, otherwise)
    new_args(), act_code(name)     the launch argument record and an activation's code
    forward(shape, args, keep)     one launch: every layer, on the current stream
                                   (keep: the training forward that keeps h)
    backward_blocks(shape, rows), backward(shape, args, blocks)
                                   recompute backward: dx, dW, db
    stored_warps(shape, rows_pad), backward_stored(shape, args, warps), reduce(shape, args)
                                   backward from kept h: dx, dz^T tiles, db partials;
                                   the sum of dW (from a plan) and db partials
    dzt_rows(), sm_count()         rows of a dz^T tile; the GPU's multiprocessors
    use_fatbin(path)               launch from another build of the kernels (benchmarks)
    DeviceArray, from_dlpack       device memory and torch/CuPy tensors viewed in place
    copy_in(address, x), copy_out(x, address), synchronize()
                                   host <-> device on the backend's stream
"""
from brgemm.backend._cuda_driver import _copy_in, _copy_out, stream, synchronize  # noqa: F401
from brgemm.backend._cuda_mlp import (Shape, Unsupported, act_code, backward,  # noqa: F401
                                      backward_blocks, backward_stored, dzt_rows, forward,
                                      new_args, reduce, sm_count, stored_warps, use_fatbin)
from brgemm.backend.cuda import DeviceArray, from_dlpack  # noqa: F401


def copy_in(address, x):
    """NumPy array x -> device memory at `address`, on the backend's stream."""
    _copy_in(address, x, stream())


def copy_out(x, address):
    """Device memory at `address` -> NumPy array x, on the backend's stream."""
    _copy_out(x, address, stream())
