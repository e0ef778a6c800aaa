"""The SYCL backend beyond what every device backend promises
(test_device_backends.py: one submission per phase, no libxsmm kernel,
resident tensors, errors): NumPy arrays stay where they are on the CPU."""
import pytest

import brgemm

if "sycl" not in brgemm.backends():
    pytest.skip("no SYCL device here", allow_module_level=True)


def test_to_device_on_the_cpu_is_the_array_itself(rng):
    A = rng.standard_normal((3, 4)).astype("float32")
    assert brgemm.to_device(A, "cpu") is A
    assert brgemm.to_host(A) is A
