"""When a worker reads its dataset directly instead of through a multi-device iterator."""

import pytest
import tensorflow as tf

from tfx_dist.input.direct_input import wanted

CPU = "/job:worker/replica:0/task:0/device:CPU:0"
Mode = tf.distribute.InputReplicationMode


def test_cpu_replicas_read_directly():
    assert wanted([CPU], None)
    assert wanted([CPU], tf.distribute.InputOptions())
    assert wanted(["/device:CPU:0"], tf.distribute.InputOptions(experimental_fetch_to_device=False))
    # Several logical CPUs of the worker's host: the host's memory holds every element.
    assert wanted([CPU, CPU.replace("CPU:0", "CPU:1")], None, host=CPU)
    assert wanted(["/device:CPU:0", "/cpu:1"], None, host=CPU)  # local, not spelled out


def test_others_keep_the_multi_device_iterator():
    assert not wanted([CPU.replace("CPU", "GPU")], None)  # it prefetches to the device
    assert not wanted([CPU, CPU.replace("CPU", "GPU")], None)
    assert not wanted([CPU.replace("task:0", "task:1")], None, host=CPU)  # another machine's CPU
    assert not wanted([CPU], tf.distribute.InputOptions(
        experimental_replication_mode=Mode.PER_REPLICA, experimental_fetch_to_device=False))
    assert not wanted([CPU], tf.distribute.InputOptions(
        experimental_replication_mode=Mode.PER_REPLICA, experimental_place_dataset_on_device=True,
        experimental_fetch_to_device=False))


def test_setting_off(monkeypatch):
    monkeypatch.setenv("TFX_DIRECT_INPUT", "off")
    assert not wanted([CPU], None)
    monkeypatch.setenv("TFX_DIRECT_INPUT", "never")
    with pytest.raises(ValueError, match="TFX_DIRECT_INPUT"):
        wanted([CPU], None)
