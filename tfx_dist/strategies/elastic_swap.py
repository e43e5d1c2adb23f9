"""A multi-worker strategy follows the job's membership: after an elastic reset it runs on the new
communicator, with the new rank and number of workers.

What changes with the number of workers, and so needs the user's (or the elastic layer's) new
datasets and functions: the input sharding (each worker reads ``1/size`` of the data: distribute
the dataset again), the MEAN divisor and the collectives' communicator, both fixed when a
``tf.function`` is traced (trace it again: the old trace holds the closed communicator's id and
fails, never reducing with a stale divisor). The collectives' names start again from the first
graph traced after the reset, as they do in a new process, so that a joined worker's names match.

In an elastic job variables are not broadcast from the chief when they are created (a worker that
joins creates them while the others train): the state is made equal by the elastic state's
broadcast from rank 0 after each reset (``Generation.joined``).
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from tfx_dist.elastic import generation as generation_lib
from tfx_dist.elastic import membership


def member_info(info, generation):
    """``info`` at this worker's place in ``generation`` (see `tfx_dist.elastic.generation`)."""
    return generation_lib.member_info(info, generation, membership.communicator().addresses)


def follow_resets(extended) -> None:
    """Makes ``extended`` (a `MultiWorkerMirroredExtended`) swap to each new generation's communicator."""
    ref = weakref.ref(extended)

    def on_reset(generation, communicator):
        target = ref()
        if target is None:
            membership.remove_listener(on_reset)
        else:
            swap(target, generation, communicator)

    membership.on_reset(on_reset)


def swap(extended, generation, communicator) -> None:
    """Points ``extended``'s transport, cross-device ops and cluster fields at ``communicator``."""
    transport = extended._transport
    transport.communicator = communicator
    transport.rank, transport.size = communicator.rank, communicator.size
    extended._cross_device_ops.restart_naming()
    info = member_info(extended._cluster_info, generation)
    extended._cluster_info = info
    extended._num_workers = info.num_workers
    extended._id_in_cluster = info.rank
    extended._is_chief = info.is_chief
    extended._task_type, extended._task_id = info.task_type, info.task_index
    extended._cluster_spec = tf.train.ClusterSpec(info.cluster_dict())
    tf.get_logger().info("tfx_dist.MultiWorkerMirroredStrategy: generation %d, rank %d of %d",
                         generation.number, info.rank, info.num_workers)
