"""Blocked layouts: a matrix M [R, S] as tiles [R/br][S/bs][br][bs] (or with
the tile grid swapped, [S/bs][R/br][br][bs]), zero-padded at ragged edges.
Zeros add nothing to a reduction and padded outputs are cropped on the way
out, so any size works with any block size. The copies run in C, parallel
over tiles: the functional forms of the primitives pay them on every call.

Every copy takes the element type it writes (`dtype`): the source's own, or
bfloat16 from float32, rounded to nearest even in the same pass. Images
(`image_to_blocks`, `blocks_to_image`) are [N, C, H, W] arrays with channels
blocked innermost and a zero border; `taps_to_blocks` tiles a [K, C, *taps]
array (a convolution's weights) tap by tap.

`Layout` names a tensor's dimensions and gives element offsets and leading
dimensions, so that a loop nest reads like its formula (x.at(n, c, h, w)
for x[n][c][h][w]); `matrix_tiles` is a plain or blocked matrix as tiles."""
import math

import numpy as np

from brgemm import dtypes
from brgemm._layout_args import LIMIT, array, flag, matrix, pair, size, tiles
from brgemm._layout_args import check_out as _check_out
from brgemm._layout_args import out_dtype as _out_dtype
from brgemm._layout_args import row_stride as _row_stride
from brgemm._layout_args import threads as _threads
from brgemm.backend import cpu


def pick_block(dim, target, multiple=1):
    """A block size for a dimension of `dim`: all of it when it fits in `target`,
    else the largest divisor in [target/2, target] that is a multiple of
    `multiple` (the kernel's vector width for its n), else `target` and padding."""
    if not (type(dim) is int and type(target) is int and type(multiple) is int
            and dim > 0 and target > 0 and multiple > 0):
        dim, target = size(dim, "dim", high=None), size(target, "target", high=None)
        multiple = size(multiple, "multiple", high=None)
    if dim <= target:
        return dim
    for b in range(target, max(target // 2, 1) - 1, -1):
        if dim % b == 0 and b % multiple == 0:
            return b
    return target


def nblocks(dim, b):
    """The blocks of b that cover dim (>= 0) elements."""
    if not (type(dim) is int and type(b) is int and dim >= 0 and b > 0):
        dim, b = size(dim, "dim", 0, None), size(b, "b", high=None)
    return -(-dim // b)


# C entry points and helpers looked up once: a functional call makes several copies
_F32, _BF16 = dtypes.float32, dtypes.bfloat16
_address, _ok, _NULL, _OK = cpu.address, cpu.check, cpu.ffi.NULL, cpu.lib.BRGEMM_OK
_new, _cast, _overlap = cpu.ffi.new, cpu.ffi.cast, np.may_share_memory
_to_blocks, _from_blocks = cpu.lib.brgemm_cpu_to_blocks_sums, cpu.lib.brgemm_cpu_from_blocks
_to_blocks_vnni = cpu.lib.brgemm_cpu_to_blocks_vnni
_image_to_blocks = cpu.lib.brgemm_cpu_image_to_blocks
_blocks_to_image = cpu.lib.brgemm_cpu_blocks_to_image
_taps_to_blocks = cpu.lib.brgemm_cpu_conv_weights_to_blocks
_taps_from_blocks = cpu.lib.brgemm_cpu_conv_weights_from_blocks


def to_blocks(x, br, bs, transpose=False, swap_grid=False, out=None, threads=None, dtype=None,
              sums=None, vnni=False):
    """M = x (or x.T with transpose) as [Rb][Sb][br][bs] tiles ([Sb][Rb][..] with
    swap_grid), 64-byte aligned, of `dtype` (default x's; bf16 from f32 rounds);
    into `out` when given (layers reuse buffers). sums: an f32 array of x's
    column count that gets column_sums(x), bit for bit, summed as the copy
    reads x (one pass over x instead of two). vnni: bf16 tiles in VNNI pairs
    (brgemm.vnni.vnni_tiles' layout; br even), made in the same pass."""
    if type(x) is np.ndarray and x.ndim == 2 and x.flags.c_contiguous and x.size \
            and (x.dtype is _F32 or x.dtype is _BF16):
        ld = x.shape[1]  # the common case at once: what matrix() gives it
    else:
        x, ld = matrix(x, "x")
    if not (type(br) is int and type(bs) is int and 0 < br <= LIMIT and 0 < bs <= LIMIT):
        br, bs = size(br, "br"), size(bs, "bs")
    if not (transpose is False and swap_grid is False and vnni is False):
        transpose, swap_grid = flag(transpose, "transpose"), flag(swap_grid, "swap_grid")
        vnni = flag(vnni, "vnni")
    dt = _out_dtype(x, dtype)
    if vnni and (dt != _BF16 or br % 2 or sums is not None):
        raise ValueError(f"vnni: takes bf16 tiles of even br and no sums, got {dt}, br={br}")
    R, S = (x.shape[1], x.shape[0]) if transpose else x.shape
    Rb, Sb = -(-R // br), -(-S // bs)
    out = _check_out(out, (Sb, Rb, br, bs) if swap_grid else (Rb, Sb, br, bs), dt)
    if _overlap(out, x):
        raise ValueError("out: overlaps x")
    if sums is not None:
        sums = _check_out(sums, (x.shape[1],), dtypes.float32, "sums")
        if _overlap(sums, x) or _overlap(sums, out):
            raise ValueError("sums: overlaps x or out")
    if vnni:
        rc = _to_blocks_vnni(_address(x), R, S, ld, transpose, swap_grid, x.itemsize, br, bs,
                             _address(out), _threads(threads))
    else:
        rc = _to_blocks(_address(x), R, S, ld, transpose, swap_grid, x.itemsize, br, bs,
                        _address(out), out.itemsize,
                        _NULL if sums is None else _cast("float *", _address(sums)),
                        _threads(threads))
    if rc != _OK:
        _ok(rc, "to_blocks")
    return out


def from_blocks(t, R, S, transpose=False, swap_grid=False, dtype=None, threads=None, out=None):
    """The matrix M [R, S] that tiles t hold (M.T with transpose), of `dtype`
    (default t's; float32 from bf16 tiles is exact), as a new array or into
    `out` (C-contiguous, of that shape and dtype, not overlapping t)."""
    if not (type(t) is np.ndarray and t.ndim == 4 and t.flags.c_contiguous and t.size):
        tiles(t, "t", 4, "[Rb][Sb][br][bs]")
    if not (type(R) is int and type(S) is int and 0 < R <= LIMIT and 0 < S <= LIMIT):
        R, S = size(R, "R"), size(S, "S")
    if not (transpose is False and swap_grid is False):
        transpose, swap_grid = flag(transpose, "transpose"), flag(swap_grid, "swap_grid")
    Rt, St, br, bs = t.shape
    if (Rt, St) != ((-(-S // bs), -(-R // br)) if swap_grid else (-(-R // br), -(-S // bs))):
        raise ValueError(f"t: tiles {t.shape} do not cover a {R}x{S} matrix")
    shape = (S, R) if transpose else (R, S)
    dt = _out_dtype(t, dtype, "t", widen=True)
    out = _check_out(out, shape, dt)  # a new one: every element written below
    if _overlap(out, t):
        raise ValueError("out: overlaps t")
    if t.itemsize < out.itemsize:  # bf16 to f32, which the C copy does not do: exact
        t = t.astype(_F32)
    rc = _from_blocks(_address(t), R, S, br, bs, swap_grid, transpose, t.itemsize, _address(out),
                      shape[1], out.itemsize, _threads(threads))
    if rc != _OK:
        _ok(rc, "from_blocks")
    return out


def transpose_blocks(t, out=None, threads=None, pair=1, sums=None):
    """Tiles of M [Rb][Sb][br][bs] -> tiles of M.T [Sb][Rb][bs][br] (into `out`);
    pair > 1 (dividing Sb): [Sb/pair][Rb][pair*bs][br], each result tile
    `pair` neighbouring ones stacked (tiles of M.T of pair*bs rows). sums: an
    f32 array [Sb*bs] that gets M's column sums (padding rows included), bit
    for bit column_sums', summed as the copy reads t (one pass instead of two)."""
    tiles(t, "t", 4, "[Rb][Sb][br][bs]")
    _out_dtype(t, None, "t")
    Rb, Sb, br, bs = t.shape
    pair = size(pair, "pair")
    if Sb % pair:
        raise ValueError(f"pair: expected an int >= 1 dividing the {Sb} tile columns, got {pair!r}")
    out = _check_out(out, (Sb // pair, Rb, pair * bs, br), t.dtype)
    if _overlap(out, t):
        raise ValueError("out: overlaps t")
    if sums is not None:
        sums = _check_out(sums, (Sb * bs,), dtypes.float32, "sums")
        if _overlap(sums, t) or _overlap(sums, out):
            raise ValueError("sums: overlaps t or out")
    cpu.check(cpu.lib.brgemm_cpu_swap_tiles(
        cpu.address(t), Rb, Sb, br, bs, t.itemsize, pair, cpu.address(out),
        _NULL if sums is None else _cast("float *", _address(sums)), _threads(threads)),
        "transpose_blocks")
    return out


def convert(x, dtype, out=None, threads=None):
    """x as a C-contiguous array of `dtype` (x's own: a parallel copy; bf16
    from f32: rounded), new or into `out`. x itself when it already is one."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x: expected a numpy.ndarray, got {type(x).__name__}")
    dt = _out_dtype(x, dtype)
    if out is None and dt == x.dtype and x.flags.c_contiguous:
        return x
    out = _check_out(out, x.shape, dt)
    if x.size == 0:
        return out
    if np.may_share_memory(out, x):
        raise ValueError("out: overlaps x")
    flat = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    ld = _row_stride(flat, "x")
    if ld is None:  # not rows of contiguous elements: NumPy's copy, then ours
        flat = np.ascontiguousarray(flat)
        ld = flat.shape[1]
    cpu.check(cpu.lib.brgemm_cpu_convert(cpu.address(flat), flat.shape[0], flat.shape[1], ld,
                                         x.itemsize, cpu.address(out), out.itemsize,
                                         _threads(threads)), "convert")
    return out


def image_to_blocks(x, bc, Hp, Wp, top=0, left=0, pixels_last=False, phases=1, dtype=None,
                    out=None, threads=None):
    """x [N, C, H, W] (any non-negative strides: read in place) -> [N][Cb][Hp][Wp][bc]
    with x at (top, left) in a zero border and zero padded channels. pixels_last:
    [N][Cb][Hp][phases][bc][Wp/phases], padded column j * phases + p at [p][..][j]."""
    array(x, "x", 4, "[N, C, H, W]")
    dt = _out_dtype(x, dtype)
    N, C, H, W = x.shape
    bc, Hp, Wp, phases = size(bc, "bc"), size(Hp, "Hp"), size(Wp, "Wp"), size(phases, "phases")
    top, left = size(top, "top", 0), size(left, "left", 0)
    pixels_last = flag(pixels_last, "pixels_last")
    if Hp < top + H or Wp < left + W or Wp % phases or (phases > 1 and not pixels_last):
        raise ValueError(f"Hp, Wp: a {H}x{W} image at ({top}, {left}) does not fit {Hp}x{Wp} "
                         f"(bc {bc}, phases {phases})")
    x, strides = _image_strides(x)
    Cb = nblocks(C, bc)
    shape = ((N, Cb, Hp, phases, bc, Wp // phases) if pixels_last else (N, Cb, Hp, Wp, bc))
    out = _check_out(out, shape, dt)
    if _overlap(out, x):
        raise ValueError("out: overlaps x")
    rc = _image_to_blocks(_address(x), N, C, H, W, strides, x.itemsize, bc, Hp, Wp, top, left,
                          phases, pixels_last, _address(out), out.itemsize, _threads(threads))
    if rc != _OK:
        _ok(rc, "image_to_blocks")
    return out


def _image_strides(x):
    """x (read in place where its strides allow) and its element strides for C."""
    if x.flags.c_contiguous:  # the common case at once (the callers refuse an empty x)
        _, C, H, W = x.shape
        return x, _new("int64_t[4]", (C * H * W, H * W, W, 1))
    # a dimension of one element has no stride that matters (NumPy keeps any, even
    # negative, and calls the array contiguous): give it the contiguous one
    steps = [s if n > 1 else x.itemsize * math.prod(x.shape[i + 1:])
             for i, (n, s) in enumerate(zip(x.shape, x.strides))]
    if any(s < 0 or s % x.itemsize for s in steps):
        x = np.ascontiguousarray(x)
        steps = list(x.strides)
    return x, cpu.ffi.new("int64_t[4]", [s // x.itemsize for s in steps])


def image_to_planes(x, bc, stride, Hs, Ws, L, top=0, left=0, dtype=None, out=None, threads=None):
    """x [N, C, H, W] (any non-negative strides: read in place) -> planes
    [N][Cb][sh][sw][bc][L]: per channel and phase (a, b) of stride (sh, sw), the
    padded image's pixels (i * sh + a, j * sw + b) at i * Ws + j, x at (top,
    left) in a zero border, zeros from Hs * Ws to L and in padded channels."""
    array(x, "x", 4, "[N, C, H, W]")
    dt = _out_dtype(x, dtype)
    N, C, H, W = x.shape
    (sh, sw), bc, Hs, Ws = pair(stride, "stride"), size(bc, "bc"), size(Hs, "Hs"), size(Ws, "Ws")
    L, top, left = size(L, "L"), size(top, "top", 0), size(left, "left", 0)
    if Hs * sh < top + H or Ws * sw < left + W or L < Hs * Ws:
        raise ValueError(f"Hs, Ws: a {H}x{W} image at ({top}, {left}) does not fit {Hs}x{Ws} "
                         f"phase planes of stride {stride} and length {L} (bc {bc})")
    x, strides = _image_strides(x)
    out = _check_out(out, (N, nblocks(C, bc), sh, sw, bc, L), dt)
    if np.may_share_memory(out, x):
        raise ValueError("out: overlaps x")
    cpu.check(cpu.lib.brgemm_cpu_image_to_planes(
        cpu.address(x), N, C, H, W, strides, x.itemsize, bc, top, left, sh, sw, Hs, Ws, L,
        cpu.address(out), out.itemsize, _threads(threads)), "image_to_planes")
    return out


def blocks_to_image(t, C, H, W, top=0, left=0, dtype=None, out=None, threads=None):
    """t [N][Cb][Hp][Wp][bc] -> the [N, C, H, W] image at (top, left), of `dtype`."""
    tiles(t, "t", 5, "[N][Cb][Hp][Wp][bc]")
    N, Cb, Hp, Wp, bc = t.shape
    C, H, W = size(C, "C"), size(H, "H"), size(W, "W")
    top, left = size(top, "top", 0), size(left, "left", 0)
    if nblocks(C, bc) != Cb or Hp < top + H or Wp < left + W:
        raise ValueError(f"t: blocks {t.shape} do not hold a {C}x{H}x{W} image at ({top}, {left})")
    dt = _out_dtype(t, dtype, "t")
    out = _check_out(out, (N, C, H, W), dt)
    if _overlap(out, t):
        raise ValueError("out: overlaps t")
    rc = _blocks_to_image(_address(t), N, C, H, W, bc, Hp, Wp, top, left, t.itemsize,
                          _address(out), out.itemsize, _threads(threads))
    if rc != _OK:
        _ok(rc, "blocks_to_image")
    return out


def taps_to_blocks(w, bk, bc, transposed=False, dtype=None, out=None, threads=None, vnni=False):
    """w [K, C, *taps] -> per tap the K x C matrix's transpose as tiles,
    [Kb][Cb][taps][bc][bk]; transposed: the matrix itself, [Cb][Kb][taps][bk][bc].
    vnni: bf16 tiles in VNNI pairs (brgemm.vnni.vnni_tiles' layout; bc, or bk
    transposed, even), made in the same pass."""
    array(w, "w", None, "[K, C, ...]")
    if w.ndim < 2:
        raise ValueError(f"w: expected a non-empty [K, C, ...] array, got shape {w.shape}")
    dt = _out_dtype(w, dtype, "w")
    bk, bc = size(bk, "bk"), size(bc, "bc")
    transposed, vnni = flag(transposed, "transposed"), flag(vnni, "vnni")
    if vnni and (dt != _BF16 or (bk if transposed else bc) % 2):
        raise ValueError(f"vnni: takes bf16 tiles of an even number of rows, got {dt}, "
                         f"{'bk' if transposed else 'bc'}={bk if transposed else bc}")
    w = np.ascontiguousarray(w)
    K, C, RS = w.shape[0], w.shape[1], math.prod(w.shape[2:])
    Kb, Cb = nblocks(K, bk), nblocks(C, bc)
    out = _check_out(out, (Cb, Kb, RS, bk, bc) if transposed else (Kb, Cb, RS, bc, bk), dt)
    if _overlap(out, w):
        raise ValueError("out: overlaps w")
    rc = _taps_to_blocks(_address(w), K, C, RS, w.itemsize, bk, bc, transposed, vnni,
                         _address(out), out.itemsize, _threads(threads))
    if rc != _OK:
        _ok(rc, "taps_to_blocks")
    return out


def taps_from_blocks(t, K, C, taps, c_rows=False, dtype=None, out=None, threads=None):
    """The sum over shares of f32 tiles t [J][Kb][Cb][RS][bk][bc] (c_rows:
    [..][bc][bk]) as w [K, C, *taps] of `dtype` (f32 or bf16, rounded)."""
    if not isinstance(taps, (tuple, list)):
        raise TypeError(f"taps: expected a sequence of ints, got {taps!r}")
    taps = tuple(size(n, "taps") for n in taps)
    RS = math.prod(taps)
    tiles(t, "t", 6, "[J][Kb][Cb][RS][..][..]")
    if t.dtype != dtypes.float32:
        raise TypeError(f"t: expected float32 tiles, got {t.dtype}")
    J, Kb, Cb, RS_, t0, t1 = t.shape
    c_rows = flag(c_rows, "c_rows")
    bk, bc = (t1, t0) if c_rows else (t0, t1)
    K, C = size(K, "K"), size(C, "C")
    if (Kb, Cb, RS_) != (nblocks(K, bk), nblocks(C, bc), RS):
        raise ValueError(f"t: tiles {t.shape} do not hold [{K}, {C}, {RS} taps] weights")
    dt = _out_dtype(t, dtype, "t")  # (t is f32: f32 or bf16)
    out = _check_out(out, (K, C) + taps, dt)
    if _overlap(out, t):
        raise ValueError("out: overlaps t")
    rc = _taps_from_blocks(_cast("float *", _address(t)), J, K, C, RS, bk, bc, c_rows,
                           _address(out), out.itemsize, _threads(threads))
    if rc != _OK:
        _ok(rc, "taps_from_blocks")
    return out


def column_sums(x, out=None, threads=None):
    """x [rows, cols] (f32 or bf16, rows of contiguous elements) summed over its
    rows in f32, in parallel over column strips: [cols] float32."""
    x, ld = matrix(x, "x", nonempty=False)
    out = _check_out(out, (x.shape[1],), dtypes.float32)
    if x.shape[1] == 0:
        return out
    cpu.check(cpu.lib.brgemm_cpu_column_sums(cpu.address(x), x.shape[0], x.shape[1], ld,
                                             x.itemsize, cpu.ffi.cast("float *", cpu.address(out)),
                                             _threads(threads)), "column_sums")
    return out


# ---------------------------------------------------------------- a layout by name

class Layout:
    """A tensor's dimensions by name, outermost first, and where its elements
    are: what a loop nest names instead of spelling out flattened offsets.
    Layout(N=2, Cb=3, Hp=10, Wp=10, bc=16) is a C-contiguous [N][Cb][Hp][Wp][bc]
    array; at(n, c, h, w) the element offset of [n][c][h][w][0] (indices left
    out are 0); ld(name) the elements between neighbours along a dimension:
    the leading dimension of a block whose rows step along it. matrix_tiles
    views a matrix, plain or blocked, as a grid of tiles.

    Nests record plans in Python loops, so a Layout is made once per plan and
    at() is plain int arithmetic on precomputed strides. It checks no index
    against its dimension (the Recorder checks the offsets it is given)."""

    __slots__ = ("names", "shape", "strides", "at")

    def __init__(self, strides=None, **dims):
        """dims: name=extent, outermost first; strides: the elements between
        neighbours of each dimension, when not C-contiguous."""
        if not dims:
            raise ValueError("dims: expected at least one dimension")
        for name, n in dims.items():
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
                raise ValueError(f"{name}: expected a positive int extent, got {n!r}")
        self.names, self.shape = tuple(dims), tuple(map(int, dims.values()))
        if strides is None:
            strides = [1] * len(dims)
            for i in range(len(dims) - 2, -1, -1):
                strides[i] = strides[i + 1] * self.shape[i + 1]
        elif len(strides) != len(dims) or not all(isinstance(s, (int, np.integer))
                                                  and not isinstance(s, bool) and s >= 0
                                                  for s in strides):
            raise ValueError(f"strides: expected {len(dims)} non-negative ints, got {strides!r}")
        self.strides = tuple(map(int, strides))
        self.at = _offset_function(self.strides)

    def ld(self, name):
        """The elements between neighbours along dimension `name`."""
        try:
            return self.strides[self.names.index(name)]
        except ValueError:
            raise ValueError(f"name: no dimension {name!r} in {self}") from None

    def transpose(self, *names):
        """The same elements with the dimensions in this order (all of them, once)."""
        if sorted(names) != sorted(self.names):
            raise ValueError(f"names: expected an order of {', '.join(self.names)}, got {names}")
        order = [self.names.index(n) for n in names]
        return Layout([self.strides[i] for i in order],
                      **{n: self.shape[i] for n, i in zip(names, order)})

    def __repr__(self):
        return "Layout " + "".join(f"[{n}={e}]" for n, e in zip(self.names, self.shape)) + \
            f" strides {self.strides}"


def matrix_tiles(rows, cols, br, bc, names, plain=False):
    """A rows x cols matrix in tiles of br x bc as the grid [Rb][Cb][br][bc],
    its dimensions named (r, c, "b" + r, "b" + c) for names (r, c): blocked
    (to_blocks' layout), or plain (row-major, tile (i, j) at row i * br and
    column j * bc, rows `cols` apart)."""
    r, c = names
    rows, cols = size(rows, "rows", high=None), size(cols, "cols", high=None)
    br, bc = size(br, "br", high=None), size(bc, "bc", high=None)
    dims = {r: nblocks(rows, br), c: nblocks(cols, bc), "b" + r: br, "b" + c: bc}
    return Layout((br * cols, bc, cols, 1), **dims) if plain else Layout(**dims)


# at(*index) for given strides, one function per rank: a generic loop over
# zip(index, strides) costs twice as much, and nests call at() per offset
_RANKED = (
    lambda s0: lambda a=0: a * s0,
    lambda s0, s1: lambda a=0, b=0: a * s0 + b * s1,
    lambda s0, s1, s2: lambda a=0, b=0, c=0: a * s0 + b * s1 + c * s2,
    lambda s0, s1, s2, s3: lambda a=0, b=0, c=0, d=0: a * s0 + b * s1 + c * s2 + d * s3,
    lambda s0, s1, s2, s3, s4: lambda a=0, b=0, c=0, d=0, e=0:
        a * s0 + b * s1 + c * s2 + d * s3 + e * s4,
    lambda s0, s1, s2, s3, s4, s5: lambda a=0, b=0, c=0, d=0, e=0, f=0:
        a * s0 + b * s1 + c * s2 + d * s3 + e * s4 + f * s5,
    lambda s0, s1, s2, s3, s4, s5, s6: lambda a=0, b=0, c=0, d=0, e=0, f=0, g=0:
        a * s0 + b * s1 + c * s2 + d * s3 + e * s4 + f * s5 + g * s6,
)


def _offset_function(strides):
    if len(strides) <= len(_RANKED):
        return _RANKED[len(strides) - 1](*strides)

    def at(*index):
        if len(index) > len(strides):
            raise TypeError(f"at() takes at most {len(strides)} indices ({len(index)} given)")
        return sum(i * s for i, s in zip(index, strides))
    return at
