"""Tests of tfx_dist.cluster: TF_CONFIG, cluster resolvers, launcher environments."""

import dataclasses
import json

import pytest

from tfx_dist import cluster
from tfx_dist.cluster import ClusterConfigError, Source


def tf_config(cluster_spec, task_type="worker", index=0, **extra):
    return {"TF_CONFIG": json.dumps({"cluster": cluster_spec,
                                     "task": {"type": task_type, "index": index}, **extra})}


CHIEF_2W_PS = {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p:1"]}


# --- TF_CONFIG: the valid cases --------------------------------------------------------------

def test_nothing_configured_is_a_cluster_of_one():
    info = cluster.resolve(environ={})
    assert (info.source, info.rank, info.num_workers, info.is_chief) == (Source.SINGLE, 0, 1, True)
    assert info.worker_addresses is None and info.cluster is None
    assert not info.is_distributed


@pytest.mark.parametrize("text", ["", "  ", "{}"])
def test_empty_tf_config_counts_as_unset(text):
    assert cluster.resolve(environ={"TF_CONFIG": text}).source == Source.SINGLE


def test_workers_only_worker_0_is_chief():
    spec = {"worker": ["h0:2222", "h1:2222", "h2:2222"]}
    infos = [cluster.resolve(environ=tf_config(spec, "worker", i)) for i in range(3)]
    assert [i.rank for i in infos] == [0, 1, 2]
    assert [i.is_chief for i in infos] == [True, False, False]
    assert infos[1].address == "h1:2222"
    assert infos[1].worker_addresses == ("h0:2222", "h1:2222", "h2:2222")
    assert infos[1].num_workers == 3 and infos[1].ps_addresses == ()
    assert infos[1].source == Source.TF_CONFIG


def test_chief_is_rank_0_and_workers_follow():
    chief = cluster.resolve(environ=tf_config(CHIEF_2W_PS, "chief", 0))
    w1 = cluster.resolve(environ=tf_config(CHIEF_2W_PS, "worker", 1))
    assert (chief.rank, chief.is_chief) == (0, True)
    assert (w1.rank, w1.is_chief, w1.num_workers) == (2, False, 3)
    # worker:0 is not the chief when a chief exists (MultiWorkerMirroredStrategy's rule)
    assert not cluster.resolve(environ=tf_config(CHIEF_2W_PS, "worker", 0)).is_chief
    assert w1.worker_addresses == ("c:1", "w0:1", "w1:1")
    assert w1.ps_addresses == ("p:1",)
    assert w1.cluster_dict() == CHIEF_2W_PS


def test_ps_and_evaluator_are_outside_the_allreduce_group():
    ps = cluster.resolve(environ=tf_config(CHIEF_2W_PS, "ps", 0))
    assert (ps.rank, ps.is_chief, ps.in_allreduce_group, ps.address) == (None, False, False, "p:1")
    assert ps.num_workers == 3
    # TensorFlow lets the evaluator be missing from the cluster.
    ev = cluster.resolve(environ=tf_config(CHIEF_2W_PS, "evaluator", 0))
    assert (ev.rank, ev.is_chief, ev.address, ev.num_workers) == (None, False, None, 3)
    spec = dict(CHIEF_2W_PS, evaluator=["e:1"])
    ev = cluster.resolve(environ=tf_config(spec, "evaluator", 0))
    assert ev.address == "e:1" and "e:1" not in ev.worker_addresses


def test_local_rank_groups_addresses_by_host():
    spec = {"chief": ["a:1"], "worker": ["a:2", "b:1", "a:3", "b:2"]}
    infos = [cluster.resolve(environ=tf_config(spec, "worker", i)) for i in range(4)]
    assert [(i.local_rank, i.local_size) for i in infos] == [(1, 3), (0, 2), (2, 3), (1, 2)]


def test_rpc_layer_ipv6_and_string_index_are_accepted():
    spec = {"worker": ["[::1]:2222", "[::1]:2223"]}
    info = cluster.resolve(environ=tf_config(spec, "worker", "1", rpc_layer="grpc",
                                             environment="cloud"))
    assert (info.rank, info.rpc_layer, info.local_size) == (1, "grpc", 2)


def test_tf_config_round_trips():
    info = cluster.resolve(environ=tf_config(CHIEF_2W_PS, "worker", 1))
    assert cluster.parse_tf_config(info.tf_config()) == info


@pytest.mark.parametrize("task_type,index", [("chief", 0), ("worker", 1), ("ps", 0)])
def test_make_tf_config_round_trips_through_the_resolvers(monkeypatch, task_type, index):
    text = cluster.make_tf_config(CHIEF_2W_PS, task_type, index, rpc_layer="grpc")
    info = cluster.resolve(environ={"TF_CONFIG": text})
    assert (info.task_type, info.task_index, info.rpc_layer) == (task_type, index, "grpc")
    assert info.cluster_dict() == CHIEF_2W_PS
    assert info.tf_config() == text
    tf = pytest.importorskip("tensorflow")  # TensorFlow's own resolver reads it alike
    monkeypatch.setenv("TF_CONFIG", text)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert resolver.cluster_spec().as_dict() == CHIEF_2W_PS
    assert (resolver.task_type, resolver.task_id, resolver.rpc_layer) == (task_type, index, "grpc")
    assert cluster.resolve(resolver) == dataclasses.replace(info, source=Source.CLUSTER_RESOLVER)


@pytest.mark.parametrize("address,host,port", [("a:1", "a", 1), ("10.0.0.2:65535", "10.0.0.2", 65535),
                                               ("[::1]:2222", "::1", 2222)])
def test_split_address_and_join_address_are_inverse(address, host, port):
    assert cluster.split_address(address) == (host, port)
    assert cluster.join_address(host, port) == address


@pytest.mark.parametrize("address", ["hostonly", "a:0", "a:99999", "::1:2222", ":1", 2222])
def test_split_address_names_what_arrived(address):
    with pytest.raises(ClusterConfigError, match=r"peer 1: expected an address \"host:port\"") as e:
        cluster.split_address(address, "peer 1")
    assert repr(address) in str(e.value) and cluster.EXPECTED_TF_CONFIG not in str(e.value)


def test_cluster_info_is_frozen_and_hashable():
    info = cluster.resolve(environ=tf_config(CHIEF_2W_PS, "worker", 1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.rank = 5
    assert hash(info) == hash(cluster.resolve(environ=tf_config(CHIEF_2W_PS, "worker", 1)))


# --- TF_CONFIG: each malformed case names the field and shows the expected shape --------------

BAD_TF_CONFIGS = [
    ("bad json", "{'cluster': oops", ["not valid JSON", "{'cluster': oops"]),
    ("not an object", "[1, 2]", ["expected a JSON object", "[1, 2]"]),
    ("missing task", json.dumps({"cluster": {"worker": ["a:1"]}}), ["missing `task`"]),
    ("missing cluster", json.dumps({"task": {"type": "worker", "index": 0}}),
     ["missing `cluster`"]),
    ("task without index", json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}}),
     ["`task` must be an object", "'type': 'worker'"]),
    ("cluster is a list", json.dumps({"cluster": ["a:1"], "task": {"type": "worker", "index": 0}}),
     ["`cluster` must be a non-empty object", "['a:1']"]),
    ("unknown task type", tf_config({"worker": ["a:1"]}, "trainer", 0)["TF_CONFIG"],
     ["unknown `task.type` 'trainer'", "chief, worker, ps, evaluator"]),
    ("master", tf_config({"master": ["a:1"]}, "master", 0)["TF_CONFIG"],
     ["unknown task type 'master' in `cluster`", "old name of \"chief\""]),
    ("index out of range", tf_config({"worker": ["a:1", "b:1"]}, "worker", 2)["TF_CONFIG"],
     ["`task.index` 2 is out of range", "`cluster.worker` has 2 task(s)"]),
    ("negative index", tf_config({"worker": ["a:1"]}, "worker", -1)["TF_CONFIG"],
     ["`task.index` must be a non-negative integer", "-1"]),
    ("duplicate address", tf_config({"chief": ["a:1"], "worker": ["b:1", "a:1"]})["TF_CONFIG"],
     ["duplicate address 'a:1'", "`cluster.worker[1]`", "`cluster.chief[0]`"]),
    ("no port", tf_config({"worker": ["a:1", "hostonly"]})["TF_CONFIG"],
     ["`cluster.worker[1]`", "'hostonly'", "host:port"]),
    ("port out of range", tf_config({"worker": ["a:99999"]})["TF_CONFIG"],
     ["`cluster.worker[0]`", "'a:99999'"]),
    ("address not a string", tf_config({"worker": [2222]})["TF_CONFIG"],
     ["`cluster.worker[0]`", "2222"]),
    ("task not in cluster", tf_config({"worker": ["a:1"]}, "ps", 0)["TF_CONFIG"],
     ["this task (ps:0) is not in the cluster", "no 'ps' entry"]),
    ("two chiefs", tf_config({"chief": ["a:1", "b:1"]}, "chief", 0)["TF_CONFIG"],
     ["`cluster.chief` may hold at most one task"]),
    ("only ps", tf_config({"ps": ["a:1"]}, "ps", 0)["TF_CONFIG"],
     ["no \"chief\" or \"worker\" task"]),
    ("empty job", tf_config({"worker": []})["TF_CONFIG"],
     ["`cluster.worker` must be a non-empty list"]),
    # Before: a bare UnicodeError from the idna codec when the rendezvous resolved it.
    ("host name over 253 characters", tf_config({"worker": ["a:1", "h" * 254 + ":2"]})["TF_CONFIG"],
     ["`cluster.worker[1]`", "254 characters", "at most 253", "'hhhh"]),
    ("host label over 63 characters",
     tf_config({"worker": ["a:1", "x" * 64 + ".example.com:2"]})["TF_CONFIG"],
     ["`cluster.worker[1]`", "a label of 64 characters", "at most 63", ".example.com:2'"]),
]


@pytest.mark.reliability
@pytest.mark.parametrize("text,fragments", [c[1:] for c in BAD_TF_CONFIGS],
                         ids=[c[0] for c in BAD_TF_CONFIGS])
def test_malformed_tf_config_is_explained(text, fragments, reliability):
    with pytest.raises(ClusterConfigError) as error:
        cluster.resolve(environ={"TF_CONFIG": text})
    message = str(error.value)
    assert isinstance(error.value, ValueError)
    assert message.startswith("TF_CONFIG")
    assert cluster.EXPECTED_TF_CONFIG in message
    for fragment in fragments:
        assert fragment in message
    reliability(f"bad input: malformed TF_CONFIG ({text[:60]})", f"ClusterConfigError: {message.splitlines()[0][:100]}")


# --- priorities and launcher environments ----------------------------------------------------

HOROVOD = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1",
           "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "2"}
OMPI = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}
SLURM = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "5", "SLURM_LOCALID": "0",
         "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "3,2",
         "SLURM_STEP_NODELIST": "node[08-09]"}


def test_horovod_environment():
    info = cluster.resolve(environ=HOROVOD)
    assert (info.source, info.rank, info.num_workers, info.local_rank, info.local_size) == (
        Source.HOROVOD, 1, 4, 1, 2)
    assert info.worker_addresses is None and info.address is None and not info.is_chief


def test_mpi_environments():
    info = cluster.resolve(environ=OMPI)
    assert (info.source, info.rank, info.num_workers, info.local_rank, info.local_size) == (
        Source.MPI, 2, 3, 0, 1)
    info = cluster.resolve(environ={"PMI_RANK": "0", "PMI_SIZE": "2"})
    assert (info.rank, info.num_workers, info.is_chief, info.local_rank) == (0, 2, True, None)


def test_slurm_environment():
    info = cluster.resolve(environ=SLURM)
    assert (info.source, info.rank, info.num_workers, info.local_rank, info.local_size) == (
        Source.SLURM, 3, 5, 0, 2)
    assert info.hosts == ("node08", "node09") and info.worker_addresses is None


def test_slurm_batch_script_is_not_a_job_step():
    # sbatch's script has SLURM_PROCID=0 and SLURM_NTASKS but is no srun step: one process.
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "n[1-2]"}
    assert cluster.resolve(environ=env).source == Source.SINGLE


def test_priority_tf_config_then_horovod_then_mpi_then_slurm():
    tf = tf_config({"worker": ["a:1", "b:1"]}, "worker", 1)
    assert cluster.resolve(environ={**SLURM, **OMPI, **HOROVOD, **tf}).source == Source.TF_CONFIG
    assert cluster.resolve(environ={**SLURM, **OMPI, **HOROVOD}).source == Source.HOROVOD
    assert cluster.resolve(environ={**SLURM, **OMPI}).source == Source.MPI


@pytest.mark.parametrize("env,fragments", [
    ({"HOROVOD_RANK": "x", "HOROVOD_SIZE": "2"}, ["HOROVOD_RANK", "'x'"]),
    ({"HOROVOD_RANK": "2", "HOROVOD_SIZE": "2"}, ["HOROVOD_RANK=2", "HOROVOD_SIZE=2"]),
    ({**OMPI, "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, ["OMPI_COMM_WORLD_LOCAL_RANK=1"]),
    ({**SLURM, "SLURM_NODEID": "2"}, ["SLURM_NODEID=2", "'3,2'"]),
])
def test_bad_launcher_variables_are_explained(env, fragments):
    with pytest.raises(ClusterConfigError) as error:
        cluster.resolve(environ=env)
    for fragment in fragments:
        assert fragment in str(error.value)


def test_tf_config_needs_addresses():
    with pytest.raises(ClusterConfigError, match="not known yet"):
        cluster.resolve(environ=HOROVOD).tf_config()


@pytest.mark.parametrize("hostlist,hosts", [
    ("n1", ["n1"]),
    ("node[01-03,7],gpu1", ["node01", "node02", "node03", "node7", "gpu1"]),
    ("a[9-10]-ib,b", ["a9-ib", "a10-ib", "b"]),
])
def test_expand_hostlist(hostlist, hosts):
    assert cluster.expand_hostlist(hostlist) == hosts


# --- cluster resolvers -----------------------------------------------------------------------

class FakeResolver:
    """Duck-typed ClusterResolver, the way tfx_dist reads one."""

    def __init__(self, spec, task_type, task_id, rpc_layer=None):
        self._spec, self.task_type, self.task_id, self.rpc_layer = spec, task_type, task_id, rpc_layer

    def cluster_spec(self):
        return self._spec


def test_resolver_wins_over_environment():
    resolver = FakeResolver({"worker": ["a:1", "b:1"]}, "worker", 1, "grpc")
    info = cluster.resolve(resolver, environ=tf_config({"worker": ["z:1"]}))
    assert (info.source, info.rank, info.rpc_layer) == (Source.CLUSTER_RESOLVER, 1, "grpc")


def test_resolver_errors_name_the_resolver():
    with pytest.raises(ClusterConfigError, match=r"FakeResolver.cluster_spec\(\).*out of range"):
        cluster.resolve(FakeResolver({"worker": ["a:1"]}, "worker", 3))
    with pytest.raises(ClusterConfigError, match="does not say which task"):
        cluster.resolve(FakeResolver({"worker": ["a:1"]}, None, None))
    with pytest.raises(TypeError, match="Expected `cluster_resolver`"):
        cluster.resolve("worker:0")
    with pytest.raises(ClusterConfigError, match=r"indices \[0, 2\]"):
        cluster.resolve(FakeResolver({"worker": {0: "a:1", 2: "b:1"}}, "worker", 0))


def test_tensorflow_resolvers(monkeypatch):
    tf = pytest.importorskip("tensorflow")
    resolvers = tf.distribute.cluster_resolver
    spec = tf.train.ClusterSpec({"chief": ["c:1"], "worker": ["w:1", "w:2"]})
    info = cluster.resolve(resolvers.SimpleClusterResolver(spec, task_type="worker", task_id=1,
                                                           rpc_layer="grpc"))
    assert (info.rank, info.num_workers, info.local_rank, info.local_size) == (2, 3, 1, 2)

    monkeypatch.setenv("TF_CONFIG", tf_config({"worker": ["a:1", "b:1"]}, "worker", 1)["TF_CONFIG"])
    info = cluster.resolve(resolvers.TFConfigClusterResolver())
    assert (info.rank, info.worker_addresses) == (1, ("a:1", "b:1"))

    for name, value in {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "4",
                        "SLURM_STEP_NODELIST": "n1,n2", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}.items():
        monkeypatch.setenv(name, value)
    info = cluster.resolve(resolvers.SlurmClusterResolver(port_base=9000, gpus_per_node=2, gpus_per_task=1,
                                                          auto_set_gpu=False))
    assert (info.rank, info.address, info.local_rank, info.local_size) == (2, "n2:9000", 0, 2)
    assert info.worker_addresses == ("n1:9000", "n1:9001", "n2:9000", "n2:9001")
