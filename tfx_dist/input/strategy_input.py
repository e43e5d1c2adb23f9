"""What every tfx_dist strategy changes in the datasets it distributes.

Replicas on their worker's host CPU read the dataset directly
(`direct_input`), and input iterators that Keras drops are destroyed in the
background (`iterator_reaper`). Both apply before the first iteration.
"""

from __future__ import annotations

from tfx_dist.input import direct_input, iterator_reaper


class StrategyInput:
    """Mixin for a `tf.distribute.StrategyExtended`, placed before TensorFlow's class."""

    def _adopt_input(self, distributed, options):
        direct_input.adopt(distributed, options)
        iterator_reaper.reap_in_background(distributed)
        return distributed

    def _experimental_distribute_dataset(self, dataset, options):
        return self._adopt_input(super()._experimental_distribute_dataset(dataset, options),
                                 options)

    def _distribute_datasets_from_function(self, dataset_fn, options):
        return self._adopt_input(super()._distribute_datasets_from_function(dataset_fn, options),
                                 options)
