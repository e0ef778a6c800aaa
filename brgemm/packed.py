"""PackedB: B blocks packed once in the layout one kernel path reads
(Kernel.pack_b), with the checks the native code trusts before reading them."""
import numpy as np


class PackedB:
    """B blocks already in the layout a kernel wants (VNNI pairs for bf16
    dot products and AMX tiles, f32 where bf16 is widened): pack once, call
    many times."""

    # fixed once made: Kernel.__call__ knows the last PackedB by identity (and
    # compares its data's geometry on every call)
    __slots__ = ("data", "count", "k", "n", "path", "__weakref__")

    def __init__(self, data, count, k, n, path):
        for name, value in zip(self.__slots__, (data, count, k, n, path)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"PackedB: {name} is fixed when B is packed; pack again "
                             "(Kernel.pack_b) or make a new PackedB")

    def check(self, kern, count, k, n, name="B"):
        """Everything a kernel's native code trusts about packed blocks: it reads
        count blocks of kern.packed_elems elements each, back to back."""
        if (self.k, self.n, self.path) != (k, n, kern.path):
            raise ValueError(f"{name}: {self!r} was packed for another kernel "
                             f"(this one: k={k}, n={n}, path={kern.path!r})")
        if isinstance(self.count, bool) or not isinstance(self.count, (int, np.integer)):
            raise TypeError(f"{name}: count {self.count!r} is not an int")
        if self.count != count:
            raise ValueError(f"{name}: has {self.count} packed blocks, A has {count}")
        data, want = self.data, (count, kern.packed_elems)
        if not isinstance(data, np.ndarray):
            raise TypeError(f"{name}: packed data is a {type(data).__name__}, not a numpy.ndarray")
        if data.dtype != kern.packed_dtype:
            raise TypeError(f"{name}: packed data has dtype {data.dtype}, the {kern.path!r} "
                            f"path packs {kern.packed_dtype}")
        if data.shape != want or not data.flags.c_contiguous:
            raise ValueError(f"{name}: packed data must be a C-contiguous {want} array "
                             f"(what pack_b returns), got shape {data.shape}")

    def __repr__(self):
        return f"PackedB(count={self.count}, k={self.k}, n={self.n}, path={self.path!r})"
