"""Loss scaling by the replica's share of the global batch, not by one over the replicas.

Replaces Keras's ``scale_loss_for_distribution`` and
``unscale_loss_for_distribution`` (``keras.src.losses.loss``), which multiply
a replica's mean loss by ``1 / num_replicas_in_sync`` and undo it. Inside a
`replica_loss_share` block they multiply and divide by that share instead
(this replica's rows over the global batch's), so the summed gradients are the
single-device gradient of the global batch, even when the replicas hold
different numbers of rows; outside one, Keras's own functions run.
"""

from __future__ import annotations

import threading

from tfx_dist._tf_compat import replacements

_loss_share = threading.local()  # per replica thread: this replica's share, a scalar tensor


class replica_loss_share:  # pylint: disable=invalid-name
    """Within the block (in one replica's thread), Keras scales losses by ``share``.

    ``share``: a float32 scalar tensor, this replica's rows over the global
    batch's rows (0 for a replica without rows).
    """

    def __init__(self, share):
        replacements.install()
        self._share = share

    def __enter__(self):
        self._outer = getattr(_loss_share, "share", None)
        _loss_share.share = self._share

    def __exit__(self, *exc):
        _loss_share.share = self._outer


def install() -> None:
    from keras.src import ops  # pylint: disable=import-outside-toplevel
    from keras.src.losses import loss as loss_module  # pylint: disable=import-outside-toplevel

    scale = loss_module.scale_loss_for_distribution
    unscale = loss_module.unscale_loss_for_distribution

    def scale_by_share(value):
        share = getattr(_loss_share, "share", None)
        if share is None:
            return scale(value)
        return ops.multiply(value, ops.cast(share, value.dtype))

    def unscale_by_share(value):
        share = getattr(_loss_share, "share", None)
        if share is None:
            return unscale(value)
        # A replica without rows has a zero loss, counted with weight 0.
        return ops.divide_no_nan(value, ops.cast(share, value.dtype))

    loss_module.scale_loss_for_distribution = scale_by_share
    loss_module.unscale_loss_for_distribution = unscale_by_share
