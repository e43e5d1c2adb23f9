"""Address completion for launchers that give ranks only (mpirun, srun): the pure parts."""

from tfx_dist.cluster import mpi_bootstrap, resolve, slurm_bootstrap


def test_one_host_uses_loopback_and_several_hosts_a_shared_subnet():
    same = [("boot", ["10.0.0.5/24", "172.17.0.1/16"])] * 3
    assert mpi_bootstrap.choose_addresses(same) == ["127.0.0.1"] * 3
    views = [("b1", ["172.17.0.1/16", "198.18.0.1/24"]), ("b1", ["172.17.0.1/16", "198.18.0.1/24"]),
             ("b2", ["172.17.0.1/16", "198.18.0.2/24"])]
    # Docker's bridge address is the same on both hosts: they still differ by boot id,
    # and the subnet holding the other host's address wins.
    assert mpi_bootstrap.choose_addresses(views) == ["198.18.0.1", "198.18.0.1", "198.18.0.2"]
    assert mpi_bootstrap.choose_addresses(
        [("b1", ["192.168.1.2/24", "10.0.0.1/8"]), ("b2", ["10.0.0.2/8"])]) == ["10.0.0.1", "10.0.0.2"]


def test_slurm_port_base_from_reserved_ports_else_the_job_id():
    assert slurm_bootstrap.slurm_port_base({"SLURM_STEP_RESV_PORTS": "12000-12015"}) == 12000
    a = slurm_bootstrap.slurm_port_base({"SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0"})
    b = slurm_bootstrap.slurm_port_base({"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0"})
    assert a != b and 15000 <= min(a, b) and max(a, b) + 16 <= 31000


def test_an_explicit_environment_is_never_completed():
    # resolve(environ=...) reads what it is given and starts no exchange.
    info = resolve(environ={"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"})
    assert (info.rank, info.num_workers, info.worker_addresses) == (1, 2, None)
