"""brgemm: one batch-reduce GEMM kernel, C = beta*C + alpha*sum_i A_i @ B_i,
and deep-learning primitives written as Python loop nests around it."""
from brgemm.backend import BackendUnavailable
from brgemm.backend import available as backends
from brgemm.arrays import aligned_empty, to_device, to_host
from brgemm.dtypes import bfloat16
from brgemm.info import info
from brgemm.kernel import Kernel, brgemm
from brgemm.packed import PackedB

__all__ = ["Kernel", "PackedB", "brgemm", "backends", "bfloat16", "aligned_empty", "to_device",
           "to_host", "BackendUnavailable", "info"]
__version__ = "0.1.0"
