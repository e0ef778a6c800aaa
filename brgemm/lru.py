"""The one eviction policy of every cache in brgemm and primitives: a bounded
dict that drops its least recently used entry when full.

JIT kernels, plans and geometries are cached by shape; a program that sees an
unbounded number of shapes (a tuner, variable sequence lengths) must not keep
them all. What an evicted entry held (native code, plan tables) is freed once
nothing else refers to it."""
import threading
from collections import OrderedDict


class LRU:
    """key -> value, at most `maxsize` entries; `get_or_make` builds a missing
    value once even when threads race for it."""

    def __init__(self, maxsize):
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"maxsize: expected a positive int, got {maxsize!r}")
        self.maxsize = maxsize
        self._d = OrderedDict()
        self._lock = threading.Lock()       # guards insertion and eviction
        self._make_lock = threading.RLock()  # one make() at a time (JIT, recording)

    def __len__(self):
        return len(self._d)

    def get(self, key, default=None):
        # OrderedDict's C methods are atomic under the GIL; an entry evicted
        # between the two calls is simply a miss
        try:
            value = self._d[key]
            self._d.move_to_end(key)
        except KeyError:
            return default
        return value

    def put(self, key, value):
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.maxsize:
                self._d.popitem(last=False)
        return value

    def get_or_make(self, key, make):
        value = self.get(key)
        if value is None:
            with self._make_lock:
                value = self.get(key)
                if value is None:
                    value = self.put(key, make())
        return value

    def items(self):
        """A snapshot of the (key, value) pairs, least recently used first."""
        with self._lock:
            return list(self._d.items())

    def pop(self, key):
        """Drop key's entry, if it is still there."""
        with self._lock:
            self._d.pop(key, None)

    def clear(self):
        with self._lock:
            self._d.clear()


class HashedOnce:
    """A base for frozen dataclasses that caches look up on every call (a
    layer's geometry): the hash of the fields computed once per instance, not
    per look-up (a geometry has dozens of fields). Its subclasses must define
    __hash__ = HashedOnce.__hash__ (a dataclass would generate its own)."""

    def __hash__(self):
        h = self.__dict__.get("_hash_once")
        if h is None:
            h = hash(tuple(getattr(self, f) for f in self.__dataclass_fields__))
            self.__dict__["_hash_once"] = h  # the instance is frozen; its hash is too
        return h

    def __getstate__(self):  # str hashes are salted per process: the copy hashes anew
        return {k: v for k, v in self.__dict__.items() if k != "_hash_once"}
