"""Reads TF_CONFIG, as Kubernetes' TFJob and tfx-dist-run set it.

TF_CONFIG is JSON::

    {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"],
                 "ps": ["host3:2222"]},
     "task": {"type": "worker", "index": 1},
     "rpc_layer": "grpc",           # optional
     "environment": "cloud"}        # optional, ignored

Other top-level keys are ignored, as TensorFlow ignores them.
"""

from __future__ import annotations

import json
from typing import Mapping

from tfx_dist.cluster.info import (EXPECTED_TF_CONFIG, ClusterConfigError, ClusterInfo, Source,
                                   from_cluster)


def parse_tf_config(text: str) -> ClusterInfo:
    """Returns the :class:`ClusterInfo` that TF_CONFIG ``text`` describes.

    Example:
      >>> info = parse_tf_config('{"cluster": {"worker": ["a:1", "b:1"]}, '
      ...                        '"task": {"type": "worker", "index": 1}}')
      >>> info.rank, info.num_workers, info.is_chief
      (1, 2, False)

    Raises:
      ClusterConfigError: bad JSON, a missing or malformed `task` or `cluster`,
        an unknown task type, an index out of range, a bad or duplicate
        address, or this task missing from the cluster.
    """
    def fail(message: str) -> ClusterConfigError:
        return ClusterConfigError(f"TF_CONFIG: {message}. Expected shape: {EXPECTED_TF_CONFIG}")

    try:
        config = json.loads(text)
    except ValueError as e:
        shown = text if len(text) <= 200 else text[:200] + "..."
        raise fail(f"not valid JSON ({e}), received {shown!r}") from None
    if not isinstance(config, Mapping):
        raise fail(f"expected a JSON object, received {config!r}")
    if "cluster" not in config:
        raise fail(f"missing `cluster`; received keys {sorted(config)}")
    if "task" not in config:
        raise fail(f"missing `task`; received keys {sorted(config)}")
    task = config["task"]
    if not isinstance(task, Mapping) or "type" not in task or "index" not in task:
        raise fail(f"`task` must be an object with \"type\" and \"index\", received {task!r}")
    rpc_layer = config.get("rpc_layer") or None
    if rpc_layer is not None and not isinstance(rpc_layer, str):
        raise fail(f"`rpc_layer` must be a string such as \"grpc\", received {rpc_layer!r}")
    return from_cluster(config["cluster"], task["type"], task["index"], source=Source.TF_CONFIG,
                        where="TF_CONFIG", rpc_layer=rpc_layer)
