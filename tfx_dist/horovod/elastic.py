"""Horovod's elastic API (``horovod.tensorflow.elastic``, ``hvd.elastic``) on tfx_dist.elastic.

Scripts change only their import::

    import tfx_dist.horovod as hvd          # was: import horovod.tensorflow as hvd

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, batch=0)

    @hvd.elastic.run
    def train(state):
        ...
        state.commit()

and run under ``tfx-dist-run --elastic`` (see docs/elastic.md). A collective
that loses a peer raises ``HorovodInternalError`` (tfx_dist's
``PeerLostError``); ``run`` restores the last commit, forms the next
generation of workers and calls the function again.
"""

from tfx_dist.elastic.run_loop import run
from tfx_dist.horovod import elastic_keras2
from tfx_dist.elastic.state import ObjectState, State, TensorFlowKerasState, TensorFlowState
from tfx_dist.errors import HostsUpdatedInterrupt
from tfx_dist.errors import PeerLostError as HorovodInternalError

elastic_keras2.install()  # Horovod's reset callbacks set `optimizer.lr` (Keras 2's name)

__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState", "State",
           "TensorFlowKerasState", "TensorFlowState", "run"]
