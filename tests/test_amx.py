"""The AMX path where this machine has none: the same kernel source over the
software model of the tile instructions (BRGEMM_AMX=model), in a subprocess
because the path is decided once per process. On an AMX Xeon the real path
runs these cases and every other bf16 test directly."""
import os
import pathlib
import subprocess
import sys

import brgemm

TESTS = pathlib.Path(__file__).resolve().parent


def test_info_says_why_bf16_is_not_on_amx():
    info = brgemm.info()
    assert info["backend"] == "cpu"
    if info["amx"]:
        assert info["bf16_path"] == "bf16-amx" and info["amx_reason"] is None
    else:
        assert info["bf16_path"] != "bf16-amx" and info["amx_reason"]


def _pytest(*args, env):
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=900)
    print(proc.stdout[-4000:], proc.stderr[-2000:])
    return proc.returncode


def test_disabled_by_environment():
    env = dict(os.environ, BRGEMM_AMX="0")
    code = ("import brgemm; i = brgemm.info(); "
            "assert i['amx'] is None and 'BRGEMM_AMX=0' in i['amx_reason'], i; "
            "assert i['bf16_path'] != 'bf16-amx'")
    subprocess.run([sys.executable, "-c", code], cwd=TESTS.parent, env=env, check=True)


def test_model_kernel_cases():
    assert _pytest(str(TESTS / "amx_cases.py"), env=dict(os.environ, BRGEMM_AMX="model")) == 0


def test_model_kernel_tunables():
    """The kernel's other schedules: passes over chunks of blocks (C stored and
    reloaded between them, macro blocks in a snake), with each step's tiles
    loaded by the step itself (the default) and by the step before, with and
    without software prefetches, forwards and every other macro block backwards,
    with T1 load hints or none, B packed ahead in strips of 16 columns (the
    default) or in VNNI rows, tiles kept configured between calls, and the
    ping-pong passes over 16 x 32 macro blocks, and groups of blocks with the
    macro blocks' snake turning between groups, with the turns between macro
    blocks tile by tile or all at once and the next macro block's first steps
    prefetched, and both operands with the T1 hint, A's with it where its
    panel does not fit L1, and each step's products B tile by B tile."""
    for tunables in (dict(BRGEMM_AMX_L1="6000", BRGEMM_AMX_PF="1", BRGEMM_AMX_BTILES="0",
                          BRGEMM_AMX_T1="0"),
                     dict(BRGEMM_AMX_L1="6000", BRGEMM_AMX_PIPE="1", BRGEMM_AMX_REVERSE="0"),
                     dict(BRGEMM_AMX_PIPE="1"),
                     dict(BRGEMM_AMX_T1="1", BRGEMM_AMX_BTILES="1", BRGEMM_AMX_KEEP="1",
                          BRGEMM_AMX_L1="20000"),
                     dict(BRGEMM_AMX_T1="2", BRGEMM_AMX_BTILES="1", BRGEMM_AMX_PIPE="1",
                          BRGEMM_AMX_L1="6000"),
                     dict(BRGEMM_AMX_T1="3", BRGEMM_AMX_BTILES="1", BRGEMM_AMX_PF="1"),
                     dict(BRGEMM_AMX_SWAP="1"), dict(BRGEMM_AMX_SWAP="1", BRGEMM_AMX_L1="20000",
                                                     BRGEMM_AMX_BTILES="0"),
                     dict(BRGEMM_AMX_GROUP="3000", BRGEMM_AMX_TURN="1", BRGEMM_AMX_T1="1",
                          BRGEMM_AMX_PFTURN="2"),
                     dict(BRGEMM_AMX_GROUP="1", BRGEMM_AMX_T1="4", BRGEMM_AMX_PFTURN="1"),
                     dict(BRGEMM_AMX_GROUP="20000", BRGEMM_AMX_PIPE="1", BRGEMM_AMX_BTILES="0"),
                     dict(BRGEMM_AMX_TURN="1", BRGEMM_AMX_REVERSE="0", BRGEMM_AMX_T1="5"),
                     dict(BRGEMM_AMX_T1="5"), dict(BRGEMM_AMX_ORDER="1", BRGEMM_AMX_T1="6"),
                     dict(BRGEMM_AMX_ORDER="1", BRGEMM_AMX_GROUP="3000", BRGEMM_AMX_L1="6000",
                          BRGEMM_AMX_BTILES="0")):
        env = dict(os.environ, BRGEMM_AMX="model", **tunables)
        assert _pytest(str(TESTS / "amx_cases.py"), "-k",
                       "edges or random or depths or packing or whole", env=env) == 0, tunables


def test_model_in_place_t1_hints():
    """The layers' VNNI weights read in place with each T1 load hint
    (BRGEMM_AMX_T1_INPLACE), against the same references as by default."""
    for mode in ("1", "2", "3"):
        env = dict(os.environ, BRGEMM_AMX="model", BRGEMM_AMX_T1_INPLACE=mode)
        assert _pytest(str(TESTS / "amx_cases.py"), "-k", "vnni", env=env) == 0, mode


def test_model_primitives_bf16():
    """FC, conv and LSTM bf16, layer and functional forms, on the model's tiles."""
    env = dict(os.environ, BRGEMM_AMX="model")
    files = [str(TESTS / f) for f in ("test_fc.py", "test_conv.py", "test_conv_span.py",
                                      "test_lstm.py")]
    assert _pytest(*files, "-k", "bf16", env=env) == 0


def test_configs_keyed_by_kernel_path():
    """["<path>".<pass>] tables apply only where the kernel runs that path, after
    the file's other tables (shape tables included); other paths' tables are
    still checked."""
    import pytest

    from brgemm.config import ConfigError, load_config
    from primitives import fc
    from primitives._config import DEFAULTS
    shape = {"N": 64, "C": 96, "K": 80}
    cfg = {"fwd": {"bn": 8, "N=64,C=96,K=80": {"bn": 12, "bc": 24}},
           "bf16-amx": {"fwd": {"bn": 32, "N=64,C=96,K=80": {"bk": 48}}}}

    def load(path, config=cfg):
        return load_config("fc", "fwd", shape, schema=fc.SCHEMA["fwd"], config=config,
                           defaults_dir=DEFAULTS, path=path)
    assert (load(None)["bn"], load(None)["bc"]) == (12, 24)
    assert (load("bf16-vnni")["bn"], load("f32")["bn"]) == (12, 12)
    amx = load("bf16-amx")
    assert (amx["bn"], amx["bc"], amx["bk"]) == (32, 24, 48)
    bad = {"bf16-vnni": {"fwd": {"bq": 1}}}
    with pytest.raises(ConfigError, match="unknown key 'bq'"):
        load("bf16-amx", bad)
    with pytest.raises(ConfigError, match="unknown pass 'fwdd'"):
        load(None, {"bf16-amx": {"fwdd": {"bn": 1}}})
