"""Training programs as the keras.io and tensorflow.org guides write them, under the in-process
strategies: the weights and metrics of one device (rtol 1e-5).

The programs are `multi_worker/keras_guide_loops.py`'s (the multi-process strategies run the same).
"""

import pytest

import tfx_dist
from local.models import CPUS
from multi_worker.keras_guide_loops import SHAPES, assert_same, run_shape

STRATEGIES = {
    "mirrored": lambda: tfx_dist.MirroredStrategy(CPUS),
    "central_storage": lambda: tfx_dist.CentralStorageStrategy(CPUS),
}


@pytest.fixture(scope="module")
def one_device():
    return {}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_guide_program_matches_one_device(strategy, shape, one_device):
    if shape not in one_device:
        one_device[shape] = run_shape(shape, None)
    assert_same(run_shape(shape, STRATEGIES[strategy]()), one_device[shape], shape=shape)
