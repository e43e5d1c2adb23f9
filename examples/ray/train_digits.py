"""The digits model on a Ray cluster: tfx_dist.MultiWorkerMirroredStrategy inside Ray Train,
step checkpoints that Ray keeps, and Ray's restarts resuming at the step.

    pip install "ray[train]"
    PYTHONPATH=$PWD/examples ray start --head --num-cpus=4   # or an existing cluster: RAY_ADDRESS=...
    PYTHONPATH=examples python3 examples/ray/train_digits.py --workers 2
    PYTHONPATH=examples python3 examples/ray/train_digits.py --workers 2 --ps 2   # ParameterServerStrategy

A CPU per worker and per server (`--ps 2`: 4 in all); with fewer, `TfxTrainer` stops at once with
an error that lists the nodes' CPUs.

Every node needs tfx_dist and this directory importable (the same PYTHONPATH
when you `ray start` it, or a runtime_env with a working_dir).
"""

import argparse
import os

import ray
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig

import tfx_dist
import tfx_dist.ray
from digits import build_model, load_data


def train_loop(config):
    # Ray wrote TF_CONFIG, tfx_dist.ray.TfxConfig the job secret: the strategy finds its peers.
    if config["ps"]:
        strategy = tfx_dist.ParameterServerStrategy()
    else:
        strategy = tfx_dist.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_model()
    x_train, x_test, y_train, y_test = load_data()
    # A killed worker: Ray restarts the group, and StepCheckpoint resumes from the last step it
    # reported (ray.train.get_checkpoint()), skipping the batches already trained on.
    model.fit(x_train, y_train, batch_size=64 * config["workers"], epochs=config["epochs"], shuffle=False,
              verbose=2 if ray.train.get_context().get_world_rank() == 0 else 0,
              callbacks=[tfx_dist.ray.StepCheckpoint(save_freq=10)])
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=64 * config["workers"], verbose=0)
    if ray.train.get_context().get_world_rank() == 0:
        print(f"test accuracy {accuracy:.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=0, help="parameter servers (ParameterServerStrategy)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--storage", default=os.path.abspath("ray_results"))
    args = parser.parse_args()
    ray.init()
    trainer = tfx_dist.ray.TfxTrainer(
        train_loop, num_ps=args.ps,
        train_loop_config={"workers": args.workers, "epochs": args.epochs, "ps": args.ps},
        scaling_config=ScalingConfig(num_workers=args.workers),
        run_config=RunConfig(storage_path=args.storage, name="digits",
                             failure_config=FailureConfig(max_failures=2),
                             checkpoint_config=CheckpointConfig(num_to_keep=2)))
    result = trainer.fit()
    print("last checkpoint:", result.checkpoint)


if __name__ == "__main__":
    main()
