"""Cross-process collectives: one communicator per process, ring all-reduce,
all-gather, broadcast, all-to-all (with splits) and reduce-scatter over TCP or
shared memory, with tensor fusion (all-reduce).

Example (each process of a 2-process job runs this with its own rank; the
tfx_dist launcher sets ``TFX_JOB_SECRET``)::

    comm = Communicator(rank, 2, ["127.0.0.1:23456", "127.0.0.1:23457"])
    total, = comm.allreduce_numpy([np.ones(4, np.float32)])   # [2, 2, 2, 2]
    comm.close()

Inside TensorFlow programs use `tfx_dist.comm.ops` (asynchronous TF kernels
over the same communicator, passed by ``comm.handle``). The class lives in
``communicator.py``; its failures are ``CollectiveError``s
(``collective_errors.py``), each also an instance of the ``tfx_dist.errors``
class of its code.
"""

from tfx_dist.comm.collective_errors import (CollectiveArgumentError, CollectiveError,
                                             CollectiveMismatchError, CollectivePeerLostError,
                                             CollectiveTimeoutError, PeerConnectionError)
from tfx_dist.comm.communicator import Communicator
from tfx_dist.comm.rendezvous import RendezvousError

__all__ = ["Communicator", "CollectiveError", "CollectiveArgumentError", "CollectiveTimeoutError",
           "CollectiveMismatchError", "CollectivePeerLostError", "PeerConnectionError", "RendezvousError"]
