"""Where primitives find their default configs, and the one call they make."""
import pathlib

from brgemm.config import load_config

DEFAULTS = pathlib.Path(__file__).resolve().parent / "configs"


def settings(primitive, pass_, shape, schema, config=None):
    """The effective settings of one pass for one shape (defaults < BRGEMM_CONFIG or config=)."""
    return load_config(primitive, pass_, shape, schema=schema, config=config, defaults_dir=DEFAULTS)
