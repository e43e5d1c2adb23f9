"""A hook into Keras 3 optimizers where they clip gradients (private ``_clip_gradients``).

Keras 3 (3.15) calls ``BaseOptimizer._clip_gradients(grads)`` once per update:
after the local accumulation of ``gradient_accumulation_steps`` passes,
before clipping, weight decay and the update. That is where Horovod's
``DistributedOptimizer`` all-reduces, and Keras has no public hook there.
"""

from __future__ import annotations

from tfx_dist._ops import UnsupportedTensorFlowError
from tfx_dist._tf_compat.versions import SUPPORTED_KERAS, supported_range

_PRIVATE = "_clip_gradients"


class GradientHook:
    """Mixed in before a Keras 3 optimizer class given to `optimizer_with_gradient_hook`.

    The method's prefix keeps it clear of Keras's own optimizer attributes.
    """

    def _tfx_gradient_hook(self, grads):
        """The gradients (a list, None kept) that the update goes on with, from ``grads``."""
        raise NotImplementedError


def optimizer_with_gradient_hook(optimizer_class: type) -> type:
    """A subclass of the Keras 3 optimizer class ``optimizer_class`` (which mixes in
    `GradientHook`) whose instances pass their gradients through
    ``self._tfx_gradient_hook(grads)`` once per update, before clipping.

    Raises:
      UnsupportedTensorFlowError: this Keras has no ``_clip_gradients`` (the
        version check let another Keras through, or Keras renamed it).
    """
    if not callable(getattr(optimizer_class, _PRIVATE, None)):
        raise UnsupportedTensorFlowError(
            f"tfx_dist's DistributedOptimizer hooks Keras {supported_range(SUPPORTED_KERAS)}'s private "
            f"optimizer method {_PRIVATE}, which {optimizer_class.__name__} does not have: "
            f"install Keras {SUPPORTED_KERAS[-1]}.x.")
    if not issubclass(optimizer_class, GradientHook):
        raise TypeError(f"{optimizer_class.__name__} does not mix in tfx_dist's GradientHook")

    def _clip_gradients(self, grads):
        return super(hooked, self)._clip_gradients(self._tfx_gradient_hook(grads))

    hooked = type(optimizer_class.__name__, (optimizer_class,),
                  {"__module__": optimizer_class.__module__, _PRIVATE: _clip_gradients})
    return hooked
