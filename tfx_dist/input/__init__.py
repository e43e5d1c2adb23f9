"""What the tfx_dist strategies do to the datasets they distribute.

* `strategy_input`: the mixin every strategy's extended object puts before
  TensorFlow's class; it applies the two below to each distributed dataset.
* `direct_input`: a worker whose replicas all run on its host CPU reads its
  dataset directly instead of through TensorFlow's multi-device iterator.
* `iterator_reaper`: iterators that Keras drops are destroyed on a background
  thread, off the training path.
* `input_balance`: whether every worker reads as many batches as the others,
  so that the multi-worker strategy may skip TensorFlow's per-step
  "this worker still has data" all-reduce.
* `array_order`: Keras's shuffled NumPy input, rebuilt in one order on every
  worker (each example once per epoch across the workers).

Nothing is imported here: each module imports TensorFlow when it is imported.
"""
