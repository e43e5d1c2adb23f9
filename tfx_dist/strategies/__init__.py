"""The tf.distribute strategies tfx_dist offers, and their private helpers."""
