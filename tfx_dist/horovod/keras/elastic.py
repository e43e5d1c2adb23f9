"""Horovod's elastic Keras API (``horovod.tensorflow.keras.elastic``) on tfx_dist.elastic.

``hvd.elastic.KerasState``, the callbacks ``CommitStateCallback``,
``UpdateBatchStateCallback``, ``UpdateEpochStateCallback``, and ``run``: a
``model.fit`` inside a ``run`` function goes on after a lost worker from the
last commit, Keras's step function traced again once for the new workers.
"""

from tfx_dist.elastic.keras_callbacks import (CommitStateCallback, KerasState,
                                              UpdateBatchStateCallback, UpdateEpochStateCallback)
from tfx_dist.elastic.run_loop import run
from tfx_dist.elastic.state import ObjectState, State, TensorFlowKerasState
from tfx_dist.errors import HostsUpdatedInterrupt
from tfx_dist.errors import PeerLostError as HorovodInternalError

__all__ = ["CommitStateCallback", "HorovodInternalError", "HostsUpdatedInterrupt", "KerasState",
           "ObjectState", "State", "TensorFlowKerasState", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run"]
