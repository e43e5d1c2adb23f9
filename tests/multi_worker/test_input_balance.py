"""When every worker provably reads the same number of batches (input_balance)."""

import numpy as np
import pytest
import tensorflow as tf

from tfx_dist.input.input_balance import same_batch_count_on_every_worker

Policy = tf.data.experimental.AutoShardPolicy


def _with_policy(ds, policy):
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy
    return ds.with_options(options)


@pytest.fixture()
def record_file(tmp_path):
    path = str(tmp_path / "data.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(3):
            writer.write(str(i).encode())
    return path


def test_in_memory_data_is_balanced():
    ds = tf.data.Dataset.from_tensor_slices(np.zeros((10, 3), np.float32)).batch(4)
    assert same_batch_count_on_every_worker(ds)
    assert same_batch_count_on_every_worker(ds.map(lambda x: x * 2).shuffle(4).prefetch(1))
    assert same_batch_count_on_every_worker(_with_policy(ds, Policy.DATA))
    assert same_batch_count_on_every_worker(_with_policy(ds, Policy.OFF))


def test_keras_array_input_is_balanced():
    from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter

    adapter = ArrayDataAdapter(np.zeros((100, 3), np.float32), np.zeros(100), batch_size=16,
                               shuffle=True)
    assert same_batch_count_on_every_worker(adapter.get_tf_dataset())


def test_file_sharding_keeps_the_check(record_file):
    ds = tf.data.Dataset.range(10).batch(4)
    assert not same_batch_count_on_every_worker(_with_policy(ds, Policy.FILE))
    assert not same_batch_count_on_every_worker(_with_policy(ds, Policy.HINT))
    # AUTO shards by FILE when the pipeline reads files, at the top or inside a function.
    assert not same_batch_count_on_every_worker(tf.data.TFRecordDataset(record_file).batch(2))
    files = tf.data.Dataset.from_tensor_slices([record_file, record_file])
    assert not same_batch_count_on_every_worker(
        files.interleave(tf.data.TFRecordDataset, cycle_length=2).batch(2))
    assert not same_batch_count_on_every_worker(
        files.map(lambda f: tf.strings.length(tf.io.read_file(f))).batch(2))


def test_setting_always_keeps_the_check(monkeypatch):
    monkeypatch.setenv("TFX_PARTIAL_BATCH_SYNC", "always")
    assert not same_batch_count_on_every_worker(tf.data.Dataset.range(10).batch(4))
    monkeypatch.setenv("TFX_PARTIAL_BATCH_SYNC", "sometimes")
    with pytest.raises(ValueError, match="TFX_PARTIAL_BATCH_SYNC"):
        same_batch_count_on_every_worker(tf.data.Dataset.range(10).batch(4))
