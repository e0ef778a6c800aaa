"""The two data types of the contract: "f32" and "bf16" (ml_dtypes.bfloat16)."""
import ml_dtypes
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)

NUMPY = {"f32": float32, "bf16": bfloat16}
NAMES = {float32: "f32", bfloat16: "bf16"}
ITEMSIZE = {name: dt.itemsize for name, dt in NUMPY.items()}  # bytes per element


def check_name(dtype) -> str:
    """The dtype argument of every public function: "f32" or "bf16" (a str
    subclass such as numpy.str_ comes back as the plain str)."""
    if not isinstance(dtype, str) or dtype not in NUMPY:
        raise ValueError(f"dtype: expected 'f32' or 'bf16', got {dtype!r}")
    return str(dtype)


def name_of(array_dtype) -> str | None:
    """'f32' or 'bf16' for a NumPy dtype, None for anything else."""
    return NAMES.get(np.dtype(array_dtype))
