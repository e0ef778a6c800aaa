"""Argument checks every primitive shares."""
import numpy as np

from brgemm.backend import resolve


def backend_name(backend):
    """The backend argument resolved (None: BRGEMM_BACKEND, else "cpu"); a
    ValueError naming it when unknown or not available here."""
    return resolve(backend)


def positive(v, name):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name}: expected a positive int, got {v!r}")
    return int(v)
