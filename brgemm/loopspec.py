"""Loop specs: loop order, blocking and parallelism as data (PARLOOPER style).

A primitive declares its logical loops once; a spec string, one letter per
loop level, says how they nest:

    loops = [Loop("a", 0, N, 32, blocks=(128,)),   # a: 128-blocks of 32-steps
             Loop("b", 0, K, 64), Loop("c", 0, C, 64)]
    nest = parse_spec("aBca", loops)   # a by 128 > b by 64 (parallel) > c by 64 > a by 32
    for idx in nest.iterate(): ...     # {'a': 0, 'b': 0, 'c': 0}, {'a': 32, ...}, ...

Grammar (parsed strictly: any deviation raises SpecError naming the
character and its 0-based position):

  letter     one level of the loop of that name; order of letters = nesting
             order, outermost first
  repeated   one more blocking level: a loop declared with blocks (b0, b1, ..)
             appears len(blocks) + 1 times; its d-th occurrence steps by
             blocks[d], its last by the loop's step
  UPPER      a parallel level; consecutive upper-case letters form one
             collapsed parallel region; at most one region per phase
  |          a barrier between two levels; splits the nest into phases

No whitespace, no other characters.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence


class SpecError(ValueError):
    """A malformed spec string or one that does not fit the declared loops."""


@dataclass(frozen=True)
class Loop:
    """A logical loop over [start, stop) by `step`, with outer block sizes `blocks`."""
    name: str
    start: int
    stop: int
    step: int
    blocks: tuple[int, ...] = ()

    def __post_init__(self):
        if not (len(self.name) == 1 and self.name.isascii() and self.name.islower()):
            raise ValueError(f"loop name {self.name!r}: must be one lower-case letter a-z")
        for field in ("start", "stop", "step"):
            v = getattr(self, field)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"loop {self.name!r}: {field} {v!r} is not an int")
        if self.step <= 0:
            raise ValueError(f"loop {self.name!r}: step {self.step} is not positive")
        object.__setattr__(self, "blocks", tuple(self.blocks))  # accept lists
        for b in self.blocks:
            if not isinstance(b, int) or isinstance(b, bool) or b <= 0 or b % self.step:
                raise ValueError(f"loop {self.name!r}: block {b!r} is not a positive "
                                 f"multiple of step {self.step}")


@dataclass(frozen=True)
class Level:
    """One level of the nest: blocking level `depth` (0 = outermost) of `loop`."""
    loop: str
    depth: int
    step: int
    parallel: bool


@dataclass(frozen=True)
class Nest:
    """A parsed spec. barriers[i] = index of the level a barrier sits after."""
    levels: tuple[Level, ...]
    barriers: tuple[int, ...]
    spec: str
    loops: tuple[Loop, ...]

    def iterate(self) -> Iterator[dict[str, int]]:
        """Yield {loop: index} for every innermost iteration, in nest order."""
        for _, _, index in self.walk():
            yield index

    def walk(self) -> Iterator[tuple[tuple, tuple, dict[str, int]]]:
        """Like iterate(), with where each iteration runs: yields (phase, task, index).

        phase: the values of the levels up to the last barrier (a barrier after
        level p means all threads meet after each iteration of levels 0..p);
        task: the values of the parallel levels after it (one parallel-loop
        iteration, run by one thread); both are tuples, equal for iterations
        that share a phase or a task."""
        cut = self.barriers[-1] + 1 if self.barriers else 0
        par = [i for i in self.parallel_levels() if i >= cut]

        def walk(i: int, values: list, index: dict, bounds: dict):
            if i == len(self.levels):
                yield tuple(values[:cut]), tuple(values[j] for j in par), dict(index)
                return
            lv = self.levels[i]
            lo, hi = bounds[lv.loop]
            for x in range(lo, hi, lv.step):
                # Inner levels of this loop stay inside [x, x + step), clipped
                # to every enclosing block, so remainders are short blocks and
                # no index is visited twice even if blocks don't divide.
                index[lv.loop] = x
                values.append(x)
                yield from walk(i + 1, values, index, {**bounds, lv.loop: (x, min(x + lv.step, hi))})
                values.pop()
        yield from walk(0, [], {}, {lp.name: (lp.start, lp.stop) for lp in self.loops})

    def parallel_levels(self) -> tuple[int, ...]:
        return tuple(i for i, lv in enumerate(self.levels) if lv.parallel)

    def phases(self) -> tuple[range, ...]:
        """Level-index ranges between barriers, e.g. 'ab|c' -> (range(0, 2), range(2, 3))."""
        cuts = (-1, *self.barriers, len(self.levels) - 1)
        return tuple(range(a + 1, b + 1) for a, b in zip(cuts, cuts[1:]))


def _by_name(loops: Mapping[str, Loop] | Sequence[Loop]) -> dict[str, Loop]:
    if isinstance(loops, Mapping):
        for key, lp in loops.items():
            if key != lp.name:
                raise ValueError(f"loops[{key!r}] is loop {lp.name!r}: key and name differ")
        return dict(loops)
    out: dict[str, Loop] = {}
    for lp in loops:
        if lp.name in out:
            raise ValueError(f"loop {lp.name!r} declared twice")
        out[lp.name] = lp
    return out


def parse_spec(spec: str, loops: Mapping[str, Loop] | Sequence[Loop], where: str = "") -> Nest:
    """Parse `spec` against the declared `loops`; raise SpecError if it does not fit.
    where: what the messages start with, e.g. "config: " for a primitive's spec."""
    loops = _by_name(loops)
    declared = ", ".join(sorted(loops))

    def fail(pos: int, msg: str):
        raise SpecError(f"{where}spec {spec!r}: position {pos}: {msg}")

    if not isinstance(spec, str) or not spec:
        raise SpecError(f"{where}spec {spec!r}: empty (declared loops: {declared})")
    levels: list[Level] = []
    barriers: list[int] = []
    regions: set[int] = set()      # phases that already have a parallel region
    prev = ""
    for pos, ch in enumerate(spec):
        if ch == "|":
            if not levels:
                fail(pos, "'|' with no loop before it")
            if prev == "|":
                fail(pos, "'|' right after '|'")
            if pos == len(spec) - 1:
                fail(pos, "'|' with no loop after it")
            barriers.append(len(levels) - 1)
        elif ch.isascii() and ch.isalpha():
            name = ch.lower()
            if name not in loops:
                fail(pos, f"{ch!r} is not a declared loop (declared: {declared})")
            blocks = loops[name].blocks
            depth = sum(lv.loop == name for lv in levels)
            if depth > len(blocks):
                fail(pos, f"{ch!r}: loop {name!r} has {len(blocks)} block size(s), "
                          f"so it must appear exactly {len(blocks) + 1} time(s)")
            if ch.isupper() and not prev.isupper():   # a new parallel region starts
                if len(barriers) in regions:
                    fail(pos, f"{ch!r} starts a second parallel region in phase {len(barriers)}")
                regions.add(len(barriers))
            step = blocks[depth] if depth < len(blocks) else loops[name].step
            levels.append(Level(name, depth, step, ch.isupper()))
        else:
            fail(pos, f"{ch!r} is not a loop letter or '|'")
        prev = ch
    for name, lp in sorted(loops.items()):
        n = sum(lv.loop == name for lv in levels)
        if n != len(lp.blocks) + 1:
            fail(len(spec), f"(end of spec) loop {name!r} appears {n} time(s), but has "
                            f"{len(lp.blocks)} block size(s), so it must appear "
                            f"exactly {len(lp.blocks) + 1} time(s)")
    return Nest(tuple(levels), tuple(barriers), spec, tuple(loops.values()))
