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


def test_model_primitives_bf16():
    """FC, conv and LSTM bf16, layer and functional forms, on the model's tiles."""
    env = dict(os.environ, BRGEMM_AMX="model")
    files = [str(TESTS / f) for f in ("test_fc.py", "test_conv.py", "test_lstm.py")]
    assert _pytest(*files, "-k", "bf16", env=env) == 0
