"""Horovod's elastic TensorFlow 2 examples (examples/horovod/elastic/, only the import and the data
changed) run under `tfx-dist-run -n 2`, shortened by the test to a few steps. Marked long (`make
reliability-long`): test_horovod_elastic_examples_kill.py runs the same examples, with a worker killed,
in CI."""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "multi_worker"))

import workers  # noqa: E402

EXAMPLES = os.path.join(workers.REPO_ROOT, "examples", "horovod", "elastic")
SHORTER = {  # the examples' lengths -> a few steps
    "tensorflow2_keras_mnist_elastic.py": [
        ("steps_per_epoch=500 // hvd.size()", "steps_per_epoch=6 // hvd.size()"),
        ("epochs=24-state.epoch", "epochs=2-state.epoch")],
    "tensorflow2_mnist_elastic.py": [("take(10000 // hvd.size())", "take(12 // hvd.size())")],
}


@pytest.mark.long
@pytest.mark.parametrize("name", sorted(SHORTER))
def test_example_runs(name, tmp_path):
    with open(os.path.join(EXAMPLES, name)) as f:
        text = f.read()
    for old, new in SHORTER[name]:
        assert old in text
        text = text.replace(old, new)
    script = tmp_path / name
    script.write_text(text)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([workers.REPO_ROOT, EXAMPLES]))
    result = subprocess.run([sys.executable, "-m", "tfx_dist.run", "-n", "2", "--timeout", "240", "--",
                             sys.executable, str(script)], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
