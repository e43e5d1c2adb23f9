"""A worker whose replicas all run on its host CPU reads its dataset directly.

For every distributed dataset TensorFlow builds a ``MultiDeviceIterator`` per
worker: a background thread fills a host-side buffer from the dataset, and a
second pipeline per device (its own prefetch thread and tf.data autotuning
thread) moves the elements to the device. When every replica runs on the CPU
that holds the data there is nothing to move, only threads to hand elements
over, and on a small CPU machine those hand-offs cost more than the rest of
a training step (see BENCHMARKS.md). And each epoch's new iterator must first
destroy the old one, which waits for that pipeline's autotuning thread; in a
multi-worker job one worker's pause stalls all the others.

TensorFlow already has the direct path for one replica per pipeline
(``InputReplicationMode.PER_REPLICA`` without fetching to the device: the
worker iterates the dataset itself); its public options allow it only for
``distribute_datasets_from_function``. The strategies select it for the
datasets they distribute when every replica of the worker runs on the
worker's host CPU, and a worker with several such replicas reads the stream
the multi-device iterator would have dealt out: consecutive elements, one per
replica, in replica order (each read waits for the one before, so the order
holds inside a graph too; the reading itself is `tfx_dist._tf_compat.direct_read`).
GPUs keep the multi-device iterator, which prefetches to the device.
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist import settings


def wanted(worker_devices, options, host=None) -> bool:
    """Whether a worker with `worker_devices` should read directly.

    ``host``: the worker's input device; the replicas must be on its task.
    """
    if settings.get("TFX_DIRECT_INPUT") == "off" or not worker_devices:
        return False
    specs = [tf.DeviceSpec.from_string(d) for d in worker_devices]
    if any(s.device_type not in (None, "CPU") for s in specs):
        return False
    if host is not None:  # a field left out means the local one
        h = tf.DeviceSpec.from_string(host)
        if any(getattr(s, f) not in (None, getattr(h, f))
               for s in specs for f in ("job", "replica", "task")):
            return False
    # Leave options that ask for something specific to TensorFlow.
    return options is None or (
        options.experimental_replication_mode == tf.distribute.InputReplicationMode.PER_WORKER
        and not options.experimental_place_dataset_on_device)


def adopt(distributed, options) -> None:
    """Makes `distributed` (not yet iterated) read directly if every input worker wants to."""
    workers = tfc.input_workers(distributed)
    if all(wanted(workers.compute_devices_for_worker(i), options, host)
           for i, host in enumerate(workers.worker_devices)):
        read_directly(distributed, options)


def read_directly(distributed, options) -> None:
    """Makes the iterators of `distributed` (not yet iterated) read directly."""
    tfc.read_one_element_per_replica(
        distributed, options.experimental_per_replica_buffer_size if options is not None else 1)
