"""examples/kubernetes/tfjob.yaml, run on simulated hosts with the TF_CONFIG the operator gives.

No Kubernetes cluster is reachable here: the test renders what Kubeflow's
training operator sets in each replica (tfjob.py), maps the replicas'
service names to the simulated hosts' addresses in each host's own
/etc/hosts, and runs the workers with exactly those values.
"""

import json
import os

import pytest

import jobs
from hosts import SimulatedHosts
from tfjob import container_env, render_tf_configs, service_names

yaml = pytest.importorskip("yaml", reason="PyYAML reads the example manifests")

MANIFEST = os.path.join(jobs.REPO_ROOT, "examples", "kubernetes", "tfjob.yaml")


def _manifest():
    with open(MANIFEST) as f:
        docs = list(yaml.safe_load_all(f))
    (tfjob,) = [d for d in docs if d["kind"] == "TFJob"]
    secrets = {d["metadata"]["name"]: d["stringData"] for d in docs if d["kind"] == "Secret"}
    return tfjob, secrets


def test_the_rendered_tf_config_follows_the_operator_format():
    tfjob, _ = _manifest()
    configs = render_tf_configs(tfjob)
    assert json.loads(configs[("worker", 1)]) == {
        "cluster": {"worker": ["tfx-digits-worker-0.default.svc:2222",
                               "tfx-digits-worker-1.default.svc:2222"]},
        "task": {"type": "worker", "index": 1}, "environment": "cloud"}


def test_the_tfjob_trains_on_simulated_hosts_with_the_operators_values(tmp_path):
    tfjob, secrets = _manifest()
    configs = render_tf_configs(tfjob)
    names = service_names(tfjob)["worker"]
    etc_hosts = "127.0.0.1 localhost\n" + "".join(
        f"198.18.0.{i + 1} {name}\n" for i, name in enumerate(names))
    env = container_env(tfjob, "worker", secrets)
    assert env["TFX_JOB_SECRET"] == secrets["tfx-digits-secret"]["job-secret"]
    with SimulatedHosts(len(names), etc_hosts=etc_hosts) as hosts:
        placements = [(i, dict(jobs.base_env(str(tmp_path), {"EPOCHS": 1}), **env,
                               TF_CONFIG=configs[("worker", i)]))
                      for i in range(len(names))]
        results = jobs.check(jobs.finish(jobs.start(hosts, "fit.py", placements, str(tmp_path)),
                                         list(range(len(names))), timeout_s=90))
    assert len({r["digest"] for r in results}) == 1
    assert all(r["transports"][1 - r["rank"]] == "tcp" for r in results)
