"""Blocked weight copies kept across functional calls, only when provably unchanged.

The functional forms (fc, conv, lstm) take `reuse=`:

    None                    the weights are converted on every call (default)
    reuse.Key(name, version)  NumPy arrays: the caller's promise that the weights
                            it passes are unchanged while (name, version) is; bump
                            the version after changing them in place
    reuse.tensors(w, b, ...)  torch tensors (the arrays passed are views of them):
                            unchanged while each tensor is the same live object
                            at the same address with the same `_version`, which
                            PyTorch bumps on every in-place write through it,
                            and no torch.optim optimizer has stepped since

A copy is also rebuilt whenever the array passed sits at another address or
has another shape, strides or dtype. A kept copy holds on to the storages it
was made from, so that no later storage (a `.data` swapped in, as
Module.to() does) can take their address. Fused optimizer steps
(Adam(fused=True), ...) write the parameters without bumping their version
counters, so any optimizer's step makes every tensors() copy stale (counted
by a hook on torch.optim's steps). Other writes that bypass a tensor's
version counter (through `.data` in place, or through a NumPy view) are not
seen: with those, pass a Key and bump it yourself. One slot per (name or
tensors, primitive, role, geometry, dtype); a new version replaces the
slot's copy.
"""
import weakref

import numpy as np

from brgemm.lru import LRU


class Key:
    """The caller's promise: the weights are unchanged while (name, version) is."""

    def __init__(self, name, version=0):
        for arg, value in (("name", name), ("version", version)):
            try:
                hash(value)
            except TypeError:
                raise TypeError(f"reuse: Key's {arg} must be hashable, got "
                                f"{type(value).__name__} {value!r}") from None
        self.name, self.version = name, version

    def _slot(self):
        return ("key", self.name)

    def _state(self):
        return self.version

    def _alive(self):
        return True

    def __repr__(self):
        return f"reuse.Key({self.name!r}, version={self.version!r})"


_steps = [0]  # torch.optim steps seen since the hook went in (watch_optimizers)
_hook = []    # the hook's handle, once registered


def _count_step(optimizer, args, kwargs):
    _steps[0] += 1


def watch_optimizers():
    """Count every torch.optim optimizer's steps from now on (once per process):
    fused steps write the parameters without bumping their version counters."""
    if not _hook:
        from torch.optim.optimizer import register_optimizer_step_post_hook
        _hook.append(register_optimizer_step_post_hook(_count_step))


def tensor_state(ts):
    """What a copy of torch tensors ts is valid for: the optimizer steps
    counted so far and each tensor's (version counter, address)."""
    watch_optimizers()
    return (_steps[0],) + tuple((t._version, t.data_ptr()) for t in ts)


class _Tensors:
    """Identity, address and version counter of torch tensors (see tensors())."""

    def __init__(self, ts):
        for t in ts:
            if not (hasattr(t, "_version") and hasattr(t, "data_ptr")):
                raise TypeError(f"reuse: expected torch tensors, got {type(t).__name__}")
        self._refs = tuple(weakref.ref(t) for t in ts)
        self._ids = tuple(id(t) for t in ts)
        self._versions = tensor_state(ts)
        # the storages, held while a copy made from them is kept: no other
        # storage can then come back at their address
        self._storages = tuple(t.untyped_storage() for t in ts)

    def _slot(self):
        return ("tensors", self._ids)

    def _state(self):
        return self._versions

    def _alive(self):
        return all(r() is not None for r in self._refs)

    def _same_objects(self, other):
        return all(a() is not None and a() is b() for a, b in zip(self._refs, other._refs))


def tensors(*ts):
    """reuse= for weights that are torch tensors (by identity, address, _version)."""
    if not ts:
        raise ValueError("reuse: tensors() needs at least one tensor")
    return _Tensors(ts)


def check(token):
    """reuse= as given: None, a Key or tensors(...); a TypeError naming it otherwise."""
    if token is not None and not isinstance(token, (Key, _Tensors)):
        raise TypeError(f"reuse: expected None, reuse.Key(name, version) or "
                        f"reuse.tensors(...), got {type(token).__name__}")
    return token


def _stamp(a):
    """What identifies an array's memory: address, shape, strides, dtype."""
    return (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)


_SLOTS = 256  # kept copies; the least recently used go first (brgemm/lru.py)
_cache = LRU(_SLOTS)  # (token's slot, what) -> (state, token, blocked copy)


def blocked(token, what, sources, make):
    """make() -- the blocked copy of `sources` for `what` (primitive, role,
    geometry, dtype) -- kept under `token` while provably unchanged."""
    if token is None:
        return make()
    key = (token._slot(), what)
    state = (token._state(), tuple(_stamp(a) for a in sources))
    hit = _cache.get(key)
    if hit is not None and hit[0] == state and (
            not isinstance(token, _Tensors) or token._same_objects(hit[1])):
        return hit[2]
    value = make()
    _sweep()
    _cache.put(key, (state, token, value))
    return value


def steady(token, site, sources):
    """token, or None where the weights under it changed since the last call
    from the same `site` (a functional form and its geometry): a training
    loop, where every kept copy would serve one call, made in fresh memory.
    The call then runs as it would without reuse= (its scratch buffers, the
    paths that read the weights in place), and the stale copies under the
    token go, once: only a site's call that returned the token can have left
    copies, so the sweep over the cache runs after those alone, never call
    after call in a training loop. Unchanged since the last call
    (inference), or never seen: the token, so the copy is kept (again)."""
    if token is None:
        return None
    slot = token._slot()
    key = (slot, ("steady", site))
    state = (token._state(), tuple(_stamp(a) for a in sources))
    seen = _cache.get(key)  # (state, token, whether that call returned the token)
    keep = seen is None or (seen[0] == state and (
        not isinstance(token, _Tensors) or token._same_objects(seen[1])))
    _cache.put(key, (state, token, keep))
    if not keep and seen[2]:
        for k in [k for k, _ in _cache.items() if k[0] == slot and k[1][0] != "steady"]:
            _cache.pop(k)
    return token if keep else None


def _sweep():
    """Drop the copies of tensors that died."""
    for key, (_, token, _) in _cache.items():
        if not token._alive():
            _cache.pop(key)


def clear():
    """Drop every kept copy (they are also dropped when their tensors die)."""
    _cache.clear()


def nbytes():
    """Bytes the kept copies hold (those of dead tensors dropped first)."""
    _sweep()
    return sum(sum(a.nbytes for a in _arrays(v[2])) for _, v in _cache.items())


def _arrays(value):
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _arrays(v)]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _arrays(v)]
    return []
