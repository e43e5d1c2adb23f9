"""What Kubeflow's training operator gives each replica of a TFJob: TF_CONFIG and env.

Follows the operator's documented behaviour (kubeflow/training-operator,
TFJob guide; ``genTFConfigJSONStr``): one service per replica, named
``<job name>-<replica type, lower case>-<index>``; the cluster lists, per
replica type, ``<service>.<namespace>.svc:<port>`` with the port of the
container named ``tensorflow``'s port named ``tfjob-port`` (default 2222);
each pod's TF_CONFIG adds its own ``task`` and ``"environment": "cloud"``.
"""

from __future__ import annotations

import json

DEFAULT_PORT = 2222


def _port(replica_spec: dict) -> int:
    for container in replica_spec["template"]["spec"]["containers"]:
        if container.get("name") == "tensorflow":
            for port in container.get("ports", []):
                if port.get("name") == "tfjob-port":
                    return int(port["containerPort"])
    return DEFAULT_PORT


def service_names(tfjob: dict) -> dict[str, list[str]]:
    """Replica type (lower case) -> the DNS names of its replicas' services, in index order."""
    name, namespace = tfjob["metadata"]["name"], tfjob["metadata"].get("namespace", "default")
    return {rtype.lower(): [f"{name}-{rtype.lower()}-{i}.{namespace}.svc"
                            for i in range(int(spec.get("replicas", 1)))]
            for rtype, spec in tfjob["spec"]["tfReplicaSpecs"].items()}


def render_tf_configs(tfjob: dict) -> dict[tuple[str, int], str]:
    """(replica type, index) -> the TF_CONFIG the operator sets in that replica's pod."""
    specs = {rtype.lower(): spec for rtype, spec in tfjob["spec"]["tfReplicaSpecs"].items()}
    cluster = {rtype: [f"{host}:{_port(specs[rtype])}" for host in hosts]
               for rtype, hosts in service_names(tfjob).items()}
    return {(rtype, i): json.dumps({"cluster": cluster, "task": {"type": rtype, "index": i},
                                    "environment": "cloud"})
            for rtype, addresses in cluster.items() for i in range(len(addresses))}


def container_env(tfjob: dict, rtype: str, secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """The ``tensorflow`` container's env, with ``secretKeyRef`` values looked up in ``secrets``."""
    spec = {k.lower(): v for k, v in tfjob["spec"]["tfReplicaSpecs"].items()}[rtype]
    (container,) = [c for c in spec["template"]["spec"]["containers"] if c["name"] == "tensorflow"]
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = secrets[ref["name"]][ref["key"]]
    return env
