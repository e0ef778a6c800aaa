"""Block: the shape of one kernel call in a plan (brgemm.plan)."""
from __future__ import annotations

from dataclasses import dataclass

from brgemm import dtypes
from brgemm.kernel import SPAN, _dim, _scalar


# c_stream: a call whose C tile is final after it (beta 0, its whole reduction)
# and not read again soon -- a weight gradient larger than the caches, returned
# to the caller -- may store it with non-temporal stores, which write whole lines
# to memory without reading them first (no read-for-ownership) and evict
# nothing: the operands the next calls read stay cached. Those stores take
# whole 64-byte lines: rows of whole vectors (n and ldc multiples of 16 f32), and
# a C on a 64-byte boundary, which the native layer tests per call (a C off it
# is stored as usual)
STREAM_ELEMS = 16


def streams_c(dtype, n, ldc, alpha=1.0, beta=0.0):
    """Whether a block of these may take c_stream (see STREAM_ELEMS)."""
    return (dtype == "f32" and alpha == 1.0 and beta == 0.0 and n % STREAM_ELEMS == 0
            and ldc % STREAM_ELEMS == 0)


@dataclass(frozen=True)
class Block:
    """One kernel shape: C[m,n] (row stride ldc) op= sum of count A[m,k] @ B[k,n]."""
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    dtype: str = "f32"      # of A and B
    c_dtype: str = "f32"
    beta: float = 1.0
    alpha: float = 1.0
    b_vnni: bool = False    # B tiles in VNNI pairs (brgemm.vnni), offsets at a block's first pair
    a_t: bool = False       # A given transposed: A[i, j] at j*lda + i (k rows of m); f32, CPU
    c_stream: bool = False  # C stored past the caches (CPU; elsewhere a hint ignored): see below

    def __post_init__(self):
        """The checks a Kernel makes of the same values (the plan's kernels are
        made without one), and one normal form: a stride that steps over a
        single row is irrelevant, so it is the row's length (fewer distinct
        JIT kernels, and no huge strides that only look large)."""
        for name in ("m", "n", "k"):
            object.__setattr__(self, name, _dim(getattr(self, name), name))
        if self.m == 1:
            object.__setattr__(self, "ldc", self.n)
        if (self.k if self.a_t else self.m) == 1:  # A's one row
            object.__setattr__(self, "lda", self.m if self.a_t else self.k)
        if self.k == 1:
            object.__setattr__(self, "ldb", self.n)
        for name in ("lda", "ldb", "ldc"):
            object.__setattr__(self, name, _dim(getattr(self, name), name))
        dtypes.check_name(self.dtype)
        if self.c_dtype not in ("f32", "bf16") or (self.dtype == "f32" and self.c_dtype != "f32"):
            raise ValueError(f"c_dtype: expected 'f32'{' or bf16' * (self.dtype == 'bf16')} "
                             f"for dtype {self.dtype!r}, got {self.c_dtype!r}")
        object.__setattr__(self, "beta", _scalar(self.beta, "beta"))
        object.__setattr__(self, "alpha", _scalar(self.alpha, "alpha"))
        if self.a_t and (self.dtype != "f32" or self.b_vnni):
            raise ValueError(f"a_t: transposed A blocks are f32 only, this block is {self.dtype}")
        if self.c_stream and not streams_c(self.dtype, self.n, self.ldc, self.alpha, self.beta):
            raise ValueError("c_stream: streaming stores take f32 blocks of alpha 1, beta 0, "
                             f"and n and ldc multiples of {STREAM_ELEMS}; this block is "
                             f"{self.dtype}, alpha {self.alpha}, beta {self.beta}, n {self.n}, "
                             f"ldc {self.ldc}")
        ab, c = dtypes.NUMPY[self.dtype].itemsize, dtypes.NUMPY[self.c_dtype].itemsize
        a_rows, a_cols = (self.k, self.m) if self.a_t else (self.m, self.k)
        for name, rows, cols, item in (("lda", a_rows, a_cols, ab), ("ldb", self.k, self.n, ab),
                                       ("ldc", self.m, self.n, c)):
            ld = getattr(self, name)
            if ld < cols:
                raise ValueError(f"{name}: {ld} is less than the block's {cols} columns")
            if rows * ld * item > SPAN:
                raise ValueError(f"{name}: {rows} rows {ld} elements apart span more than "
                                 "2**31 - 1 bytes, the most the kernel addresses per block")

    @property
    def flops(self):
        return 2 * self.m * self.n * self.k
