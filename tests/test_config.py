"""Configs: TOML defaults, overrides by file, dict or BRGEMM_CONFIG, and write_config."""
import pytest

from brgemm.config import ConfigError, load_config, write_config

SCHEMA = {"spec": str, "bm": int, "bn": int, "alpha": float, "fuse": bool}
SHAPE = {"N": 64, "C": 512, "K": 256}

DEFAULTS = """
[fwd]
spec = "aBc"
bm = 64
bn = 32
[fwd."N=64,C=512,K=256"]
bm = 16
[fwd."N=1,C=2,K=3"]
bm = 1
[bwd]
spec = "Abc"
"""


@pytest.fixture
def defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("BRGEMM_CONFIG", raising=False)
    d = tmp_path / "configs"
    d.mkdir()
    (d / "fc.toml").write_text(DEFAULTS)
    return d


def load(defaults, pass_="fwd", shape=SHAPE, **kw):
    return load_config("fc", pass_, shape, schema=SCHEMA, defaults_dir=defaults, **kw)


def write(tmp_path, text, name="user.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


# --- precedence -------------------------------------------------------------------

def test_defaults_pass_and_shape(defaults):
    assert load(defaults) == {"spec": "aBc", "bm": 16, "bn": 32}
    assert load(defaults, shape={"N": 2, "C": 2, "K": 2}) == {"spec": "aBc", "bm": 64, "bn": 32}
    assert load(defaults, shape={"K": 3, "N": 1, "C": 2})["bm"] == 1
    assert load(defaults, "bwd") == {"spec": "Abc"}
    assert load(defaults, "upd") == {}


def test_precedence_of_all_four_layers(defaults, tmp_path):
    # override pass beats default pass and default shape; override shape beats all.
    user = write(tmp_path, """
[fwd]
spec = "Bac"
bm = 8
bn = 8
[fwd."K=256,N=64,C=512"]
bn = 4
""")
    assert load(defaults, config=user) == {"spec": "Bac", "bm": 8, "bn": 4}
    assert load(defaults, config=str(user), shape={"N": 1, "C": 1, "K": 1}) == \
        {"spec": "Bac", "bm": 8, "bn": 8}
    # an override without the key keeps the default shape's value
    user2 = write(tmp_path, '[fwd]\nspec = "cab"\n', "u2.toml")
    assert load(defaults, config=user2) == {"spec": "cab", "bm": 16, "bn": 32}


def test_config_dict(defaults):
    cfg = {"fwd": {"bn": 2, "N=64,C=512,K=256": {"spec": "x"}}}
    assert load(defaults, config=cfg) == {"spec": "x", "bm": 16, "bn": 2}


def test_primitive_qualified_tables(defaults, tmp_path):
    # One BRGEMM_CONFIG file can serve several primitives: [fc.fwd] beats [fwd];
    # [conv.fwd] is someone else's and is not checked against fc's schema.
    user = write(tmp_path, """
[fwd]
bm = 2
bn = 2
[fc.fwd]
bm = 3
[fc.fwd."N=64,C=512,K=256"]
spec = "q"
[conv.fwd]
tile = 7
""")
    assert load(defaults, config=user) == {"spec": "q", "bm": 3, "bn": 2}


def test_float_and_bool_values(defaults):
    got = load(defaults, config={"fwd": {"alpha": 2, "fuse": True}})
    assert got["alpha"] == 2.0 and isinstance(got["alpha"], float) and got["fuse"] is True


# --- environment variable ---------------------------------------------------------

def test_env_var(defaults, tmp_path, monkeypatch):
    user = write(tmp_path, "[fwd]\nbm = 7\n")
    monkeypatch.setenv("BRGEMM_CONFIG", str(user))
    assert load(defaults)["bm"] == 7            # override pass beats default shape
    assert load(defaults, shape={"N": 9, "C": 9, "K": 9})["bm"] == 7
    # an explicit config= replaces the environment's file entirely
    assert load(defaults, config={"fwd": {"bn": 1}}, shape={"N": 9, "C": 9, "K": 9})["bm"] == 64


def test_env_var_empty_is_unset(defaults, monkeypatch):
    monkeypatch.setenv("BRGEMM_CONFIG", "")
    assert load(defaults)["bm"] == 16


def test_environ_reads_what_os_environ_holds(monkeypatch):
    """brgemm.environ.get, which the per-call reads use, sees every change made
    through os.environ at once: set, changed, emptied, removed, non-ASCII."""
    import os
    from brgemm import environ
    name = "BRGEMM_TEST_ENVIRON"
    monkeypatch.delenv(name, raising=False)
    assert environ.get(name) is None and environ.get(name, "d") == "d"
    for value in ("a.toml", "other.toml", "", "caf\u00e9/\u00fc.toml"):
        monkeypatch.setenv(name, value)
        assert environ.get(name) == os.environ.get(name) == value
    monkeypatch.delenv(name)
    assert environ.get(name) is None


def test_env_var_missing_file(defaults, tmp_path, monkeypatch):
    monkeypatch.setenv("BRGEMM_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match=r"BRGEMM_CONFIG=.*nope\.toml: file not found"):
        load(defaults)


def test_env_var_bad_key_names_the_variable(defaults, tmp_path, monkeypatch):
    monkeypatch.setenv("BRGEMM_CONFIG", str(write(tmp_path, "[fwd]\nbq = 1\n")))
    with pytest.raises(ConfigError, match=r"BRGEMM_CONFIG=.*user\.toml: \[fwd\]: unknown key 'bq'"):
        load(defaults)


# --- errors -----------------------------------------------------------------------

def test_missing_files(defaults, tmp_path):
    with pytest.raises(ConfigError, match=r"missing\.toml: file not found"):
        load(defaults, config=tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match=r"conv\.toml: file not found"):
        load_config("conv", "fwd", SHAPE, schema=SCHEMA, defaults_dir=defaults)


def test_unknown_pass_argument(defaults):
    with pytest.raises(ConfigError, match="unknown pass 'fwdd'"):
        load(defaults, "fwdd")


def test_toml_syntax_error_names_file(defaults, tmp_path):
    with pytest.raises(ConfigError, match=r"user\.toml: "):
        load(defaults, config=write(tmp_path, "[fwd\nbm = 1\n"))


@pytest.mark.parametrize("text, message", [
    ("[fwd]\nbq = 1\n", "user.toml: [fwd]: unknown key 'bq' (allowed: alpha, bm, bn, fuse, spec)"),
    ("[fwd]\nbm = \"64\"\n", "user.toml: [fwd]: key 'bm': '64' is a str, expected int"),
    ("[fwd]\nbm = true\n", "user.toml: [fwd]: key 'bm': True is a bool, expected int"),
    ("[fwd]\nbm = 1.5\n", "[fwd]: key 'bm': 1.5 is a float, expected int"),
    ("[fwd]\nbm = 0\n", "user.toml: [fwd]: key 'bm': 0 is not positive"),
    ("[fwd]\nbm = -3\n", "[fwd]: key 'bm': -3 is not positive"),
    ("[fwd]\nspec = 3\n", "[fwd]: key 'spec': 3 is a int, expected str"),
    ("[fwd]\nfuse = 1\n", "[fwd]: key 'fuse': 1 is a int, expected bool"),
    ("[fwd.\"N=64,C=512,K=256\"]\nbq = 1\n", "[fwd.\"N=64,C=512,K=256\"]: unknown key 'bq'"),
    ("[fwd.\"N=64, C=512,K=256\"]\nbm = 1\n", "cannot parse shape key 'N=64, C=512,K=256'"),
    ("[fwd.\"N=64,C=x,K=256\"]\nbm = 1\n", "cannot parse shape key"),
    ("[fwd.\"N=64,N=64,K=256\"]\nbm = 1\n", "cannot parse shape key"),
    ("[fwd.\"N=64,C=512\"]\nbm = 1\n", "shape key names C, N, expected C, K, N"),
    ("[fwd.\"N=64,C=512,K=256\"]\n[fwd.\"K=256,C=512,N=64\"]\n", "same shape as"),
    ("[fdw]\nbm = 1\n", "user.toml: unknown pass 'fdw' (allowed: fwd, bwd, upd, pipeline)"),
    ("[fdw.\"N=64,C=512,K=256\"]\nbm = 1\n", "unknown pass 'fdw'"),
    ("[fc.fdw]\nbm = 1\n", "user.toml: [fc]: unknown pass 'fdw'"),
    ("fwd = 3\n", "[fwd]: must be a table"),
    ("spec = \"abc\"\n", "unknown pass 'spec'"),
    ("[fc.fwd]\nbq = 1\n", "[fc.fwd]: unknown key 'bq'"),
])
def test_bad_override_files(defaults, tmp_path, text, message):
    with pytest.raises(ConfigError) as e:
        load(defaults, config=write(tmp_path, text))
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)


def test_bad_config_dict_names_it(defaults):
    with pytest.raises(ConfigError, match=r"config dict: \[bwd\]: unknown key 'zz'"):
        load(defaults, "bwd", config={"bwd": {"zz": 1}})


def test_bad_defaults_file(defaults):
    (defaults / "fc.toml").write_text("[upd]\nbm = 0\n")
    with pytest.raises(ConfigError, match=r"fc\.toml: \[upd\]: key 'bm': 0 is not positive"):
        load(defaults, "upd")


def test_other_passes_keys_not_checked(defaults):
    # bwd may have its own schema: loading fwd must not judge bwd's keys.
    assert load(defaults, config={"bwd": {"whatever": "x"}})["bm"] == 16


def test_tuple_schema(defaults):
    got = load_config("fc", "fwd", SHAPE, schema={"spec": str, "bm": (int, str), "bn": int},
                      config={"fwd": {"bm": "auto"}}, defaults_dir=defaults)
    assert got["bm"] == "auto"


# --- write_config -------------------------------------------------------------------

def test_write_config_round_trip(defaults, tmp_path):
    out = tmp_path / "tuned.toml"
    write_config(out, "fwd", SHAPE, {"spec": "cBa", "bm": 32})
    assert load(defaults, config=out) == {"spec": "cBa", "bm": 32, "bn": 32}
    # merge: a second shape, then an update of the first, given in another key order
    write_config(out, "fwd", {"N": 1, "C": 2, "K": 3}, {"bn": 5})
    write_config(out, "fwd", {"K": 256, "C": 512, "N": 64}, {"bm": 48, "alpha": 0.5,
                                                              "fuse": False})
    assert load(defaults, config=out) == {"spec": "cBa", "bm": 48, "bn": 32,
                                          "alpha": 0.5, "fuse": False}
    assert load(defaults, config=out, shape={"N": 1, "C": 2, "K": 3})["bn"] == 5
    assert out.read_text().count("[fwd.") == 2          # the same shape is not duplicated


def test_write_config_keeps_existing_tables(defaults, tmp_path):
    out = write(tmp_path, '[fwd]\nbn = 9\n[bwd]\nspec = "Z"\n', "tuned.toml")
    write_config(out, "fc.fwd", SHAPE, {"bm": 4})
    assert load(defaults, config=out) == {"spec": "aBc", "bm": 4, "bn": 9}
    assert load(defaults, "bwd", config=out) == {"spec": "Z"}


def test_write_config_quotes_strings(defaults, tmp_path):
    out = tmp_path / "tuned.toml"
    tricky = 'a"b\\c\nd\té'
    write_config(out, "upd", SHAPE, {"spec": tricky, "alpha": 1e-5})
    got = load(defaults, "upd", config=out)
    assert got == {"spec": tricky, "alpha": 1e-5}


def test_write_config_errors(tmp_path):
    out = tmp_path / "t.toml"
    with pytest.raises(ConfigError, match="primitive_pass 'fdw'"):
        write_config(out, "fdw", SHAPE, {"bm": 1})
    with pytest.raises(ConfigError, match="primitive_pass 'a.b.fwd'"):
        write_config(out, "a.b.fwd", SHAPE, {"bm": 1})
    with pytest.raises(ConfigError, match=r"cannot write \[1\]"):
        write_config(out, "fwd", SHAPE, {"bm": [1]})
    with pytest.raises(ConfigError, match="shape"):
        write_config(out, "fwd", {"N ": 1}, {"bm": 1})
    assert not out.exists()


def test_cuda_takes_its_own_fc_tables():
    """On backend "cuda" the fc layers read fc.toml's ["cuda".<pass>] tables:
    one kernel call per output block over the whole reduction, whatever the
    CPU's per-shape tables chunk; other backends keep the CPU's."""
    from brgemm.info import kernel_path
    from primitives import fc
    for dtype in ("f32", "bf16"):
        assert kernel_path(dtype, "cuda") == "cuda"
    assert kernel_path("f32", "sycl") is None
    gpu = fc.geometry(256, 3072, 768, path=kernel_path("bf16", "cuda"))
    cpu = fc.geometry(256, 3072, 768, path=None)
    assert all(c >= 3072 for c in gpu.chunk.values())
    assert min(cpu.chunk.values()) < 3072 // 64  # the CPU's table splits this reduction
    assert (gpu.bn, gpu.bc, gpu.bk) == (128, 64, 128)
    assert fc.geometry(256, 768, 768, path="cuda").bn == 64  # a per-shape GPU table


def test_cpu_qualified_path_tables(defaults, tmp_path):
    """A path "<path>@<cpu>" (brgemm.info.kernel_path on a CPU with AMX tiles)
    applies the ["<path>".<pass>] tables, then the ["<path>@<cpu>".<pass>]
    ones; another machine's qualified tables leave the plain path alone and
    are still checked."""
    (defaults / "fc.toml").write_text(DEFAULTS + '["f32".fwd]\nbm = 8\nbn = 8\n'
                                      '["f32@amx".fwd]\nbm = 4\n'
                                      '["f32@amx".fwd."N=64,C=512,K=256"]\nspec = "Bac"\n')
    assert load(defaults, path="f32") == {"spec": "aBc", "bm": 8, "bn": 8}
    assert load(defaults, path="f32@amx") == {"spec": "Bac", "bm": 4, "bn": 8}
    assert load(defaults, path="f32@amx", shape={"N": 1, "C": 2, "K": 3})["bm"] == 4
    assert load(defaults, path="bf16-vnni@amx") == {"spec": "aBc", "bm": 16, "bn": 32}
    user = write(tmp_path, '["f32@amx".fwd]\nbm = 2\n')
    assert load(defaults, path="f32@amx", config=user)["bm"] == 2
    assert load(defaults, path="f32", config=user)["bm"] == 8
    bad = write(tmp_path, '["f32@amx".fwd]\nbq = 2\n', "bad.toml")
    with pytest.raises(ConfigError, match=r'\["f32@amx"\.fwd\]: unknown key \'bq\''):
        load(defaults, path="f32", config=bad)


def test_amx_cpus_take_their_fc_tables():
    """fc.toml's ["f32@amx"...] tables apply on AMX CPUs only, after the f32 ones."""
    from primitives import fc
    amx, plain = (fc.geometry(256, 4096, 4096, path=p) for p in ("f32@amx", "f32"))
    assert (amx.specs[0], amx.chunk["fwd"]) == ("KNc", 4)
    assert (plain.specs[0], plain.chunk["fwd"]) == ("NKc", 1024)
    assert (amx.bn, amx.bc, amx.bk, amx.specs[1:]) == (plain.bn, plain.bc, plain.bk,
                                                        plain.specs[1:])
    assert fc.geometry(256, 1024, 1024, path="f32@amx") == fc.geometry(256, 1024, 1024,
                                                                       path="f32")


def test_amx_cpus_take_their_conv_update_tables():
    """conv.toml's ["f32@amx".upd] table for res3a_branch2b at N = 16: one
    image a share, shares outermost; N = 2 and the other CPUs keep the
    defaults (shares innermost, as many as the threads need)."""
    from primitives import conv
    shape = (128, 128, 28, 28, 3, 3, (1, 1), (1, 1))
    amx = conv.geometry(16, *shape, path="f32@amx")
    assert (amx.specs[2], amx.splits) == ("JKCRS", 16)
    for g in (conv.geometry(16, *shape, path="f32"), conv.geometry(2, *shape, path="f32@amx")):
        assert g.specs[2] == "KCRSJ" and g.splits < 16
        assert g.specs[:2] == amx.specs[:2]


def test_kernel_path_names_amx_cpus():
    """kernel_path adds "@amx" where bf16 runs on AMX tiles in hardware, and
    only there (our CI machines: never), "@avx2" where libxsmm targets no
    AVX-512."""
    import brgemm
    from brgemm.backend import cpu
    from brgemm.info import NARROW_TARGETS, kernel_path
    amx = cpu.amx()[0] == "hardware"
    cpu_ = "@amx" if amx else "@avx2" if cpu.arch() in NARROW_TARGETS else ""
    assert kernel_path("f32") == "f32" + cpu_
    assert kernel_path("bf16") == ("bf16-amx" if amx else
                                   brgemm.Kernel(8, 8, 8, "bf16").path + cpu_)


def test_cuda_takes_its_own_lstm_and_conv_tables():
    """On "cuda" the LSTM and conv plans read the ["cuda".<pass>] tables: whole
    reductions per call (no loop groups, which would be one launch each), and
    conv's forward with every loop parallel; the CPU keeps its own."""
    from primitives import conv, lstm
    gpu, cpu = lstm.geometry(50, 64, 1024, 1024, path="cuda"), lstm.geometry(50, 64, 1024, 1024)
    assert gpu.call_kb >= 1 << 20 and min(gpu.fc_chunks) >= 1 << 20
    assert all(s.count(s[-1].lower()) == 1 for s in gpu.fc_specs)  # no loop named twice
    assert cpu.fc_specs != gpu.fc_specs
    shape = (32, 256, 64, 56, 56, 1, 1, (1, 1), (0, 0))
    gc, cc = conv.geometry(*shape, path="cuda"), conv.geometry(*shape)
    assert gc.specs[0] == "NKPQ" and min(gc.call_kb) >= 1 << 20 and gc.span == (True, True)
    assert cc.specs[0] != gc.specs[0] and max(cc.call_kb) < 1 << 20
    # the weight update over pixel runs where output rows are short (flat_below_q)
    assert not gc.flat and conv.geometry(32, 256, 64, 28, 28, 1, 1, (1, 1), (0, 0),
                                         path="cuda").flat


def test_primitives_see_a_changed_config_file(tmp_path, monkeypatch):
    """The primitives' cached settings follow their override file: at once
    after write_config, within primitives._config.RECHECK_NS after any other
    write (the file's stamp is not taken on every call)."""
    import time

    from primitives import _config
    from primitives.fc_plans import SCHEMA as FC
    shape = {"N": 64, "C": 96, "K": 80}
    user = write(tmp_path, '[fc.fwd."N=64,C=96,K=80"]\nbn = 8\n')
    monkeypatch.setenv("BRGEMM_CONFIG", str(user))
    assert _config.settings("fc", "fwd", shape, FC["fwd"])["bn"] == 8
    for bn in (16, 24):
        write_config(user, "fc.fwd", shape, {"bn": bn})  # seen at once
        assert _config.settings("fc", "fwd", shape, FC["fwd"])["bn"] == bn
    assert _config.settings("fc", "fwd", shape, FC["fwd"])["bn"] == 24
    monkeypatch.setattr(_config, "RECHECK_NS", 50_000_000)  # the mechanism, sooner
    user.write_text('[fc.fwd."N=64,C=96,K=80"]\nbn = 32\n')  # another size: a new stamp
    time.sleep(2 * _config.RECHECK_NS / 1e9)
    assert _config.settings("fc", "fwd", shape, FC["fwd"])["bn"] == 32
