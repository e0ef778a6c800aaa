"""What a primitive hands the tuner: its legal configs for one shape and pass,
a cost model to rank them, and a way to time one by replaying its plan."""
from dataclasses import dataclass
from typing import Callable


@dataclass
class Search:
    primitive: str                      # e.g. "gemm", "fc"
    pass_: str                          # "fwd", "bwd" or "upd"
    shape: dict[str, int]               # the shape key, e.g. {"M": 64, "N": 64, "K": 64}
    default: dict                       # the config the primitive uses today for this shape
    candidates: list[dict]              # legal configs (each a full set of the pass's keys)
    cost: Callable[[dict], float]       # model estimate, seconds; lower is better
    time: Callable[[dict, int], float]  # measured seconds of one replay with `threads` threads


def best_time(run, reps=3):
    """Seconds of the fastest of `reps` calls of run(), after one warm-up call:
    what a Search's timer reports for a config."""
    import time
    run()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best
