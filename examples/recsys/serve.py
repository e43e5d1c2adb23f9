"""Serves exported recommenders the way TensorFlow Serving's loader does: no tfx_dist, no job.

    python examples/recsys/serve.py REQUESTS.json

``REQUESTS.json`` maps a SavedModel folder to its inputs (a list, or a dict of
named lists for a model with named inputs); the script prints one JSON object
mapping each folder to its predictions. It refuses to run if tfx_dist was
imported: what it proves is that the SavedModel needs none of it.
"""

import json
import sys

import numpy as np
import tensorflow as tf


def serve(folder: str, inputs):
    """The predictions of the SavedModel at ``folder`` (its ``serving_default`` signature)."""
    signature = tf.saved_model.load(folder).signatures["serving_default"]
    specs = signature.structured_input_signature[1]  # {input name: TensorSpec}
    if not isinstance(inputs, dict):
        (name,) = specs
        inputs = {name: inputs}
    outputs = signature(**{name: tf.constant(np.asarray(value), dtype=specs[name].dtype)
                           for name, value in inputs.items()})
    (output,) = outputs.values()
    return output


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        requests = json.load(f)
    answers = {folder: np.asarray(serve(folder, inputs)).tolist() for folder, inputs in requests.items()}
    assert not any(name.startswith("tfx_dist") for name in sys.modules), "tfx_dist was imported"
    print(json.dumps(answers))
