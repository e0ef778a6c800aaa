"""The fused MLP's cost model (primitives/mlp_cost.py): what its terms make it
pick, on a fixed L1 size so that the picks do not depend on the machine."""
import pytest

from primitives import mlp, mlp_cost


@pytest.mark.parametrize("native", [True, False])
def test_cost_model_bf16_training_tile_keeps_its_epilogue_in_l1(monkeypatch, native):
    """bf16 training's backward epilogue streams more tiles next to C than f32's
    (l1_bytes): narrow bf16 training steps pick the widest tile whose working set
    fits L1; f32 and inference keep the two-f32-tile working set."""
    monkeypatch.setattr(mlp_cost, "L1_BYTES", 48 << 10)
    monkeypatch.setattr(mlp_cost, "takes_vnni_b", lambda k, dtype: native)
    assert mlp_cost.flops_per_core("bf16") == mlp_cost.FLOPS_PER_CORE * (2 if native else 1)
    assert mlp_cost.flops_per_core("f32") == mlp_cost.FLOPS_PER_CORE
    for W in (16, 32):
        assert mlp_cost.l1_bytes(64, W, 2, True) > mlp_cost.l1_bytes(64, W, 4, True)
        assert mlp_cost.l1_bytes(64, W, 2, False) == mlp_cost.l1_bytes(64, W, 4, False)
        shape = {"N": 1 << 16, "C": W, "W": W, "K": W, "L": 5}
        tile = mlp.default_pipeline(shape, "bf16", True)["tile"]
        assert mlp_cost.l1_bytes(tile, W, 2, True) <= mlp_cost.L1_BYTES \
            < mlp_cost.l1_bytes(2 * tile, W, 2, True)
        assert mlp.cost(shape, "bf16", True, 5, 2 * tile) > mlp.cost(shape, "bf16", True, 5, tile)
