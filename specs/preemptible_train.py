"""MultiWorkerMirroredStrategy training that loses no work when it is stopped: SIGTERM -> save -> exit.

    python preemptible_train.py [--steps N] [--throttle-file PATH]

`tf.distribute.experimental.PreemptionCheckpointHandler` turns the SIGTERM that tfdeclare sends
when it preempts or suspends a job (or deletes it, or moves it) into: every worker finishes the
step in flight, the workers agree on a step, the chief saves a checkpoint, and all exit (code
42). When the job runs again, the handler restores that checkpoint and training goes on at the
next step: no step is done twice or skipped, and the final weights are those of a run that was
never stopped (the data of step n is a pure function of n, and the initial weights are seeded).

The checkpoint folder must be the SAME folder for every worker (the handler's non-chief copies
go to `workertemp_<i>` folders inside it): `$CHECKPOINT_DIR` when set (on Mesos: a folder every
agent shares), else `checkpoints/` in the job's folder on this machine, the parent of each
task's own working folder (`$TFDECLARE_WORK_DIR`, local backend), else `checkpoints/` where the
task runs. The chief removes it once training has finished, as Keras's BackupAndRestore does.

What it leaves in its working folder (where it runs): `steps.log`, one line `STEP ATTEMPT` per
step completed (attempt: `$TFDECLARE_ATTEMPT`), and `final_weights.sha256`. Printed: `STEP n`
lines, `RESUMED at step n` after a restore, and `FINAL_WEIGHTS_SHA256 <hex>` at the end.

`--throttle-file PATH`: while PATH exists, each step is followed by a 0.5 s pause, so that a demo
or a test can stop the job mid-run; the numbers do not change.

Keras 3 layers and optimizer with a custom loop (Keras 3 `model.fit` does not work under MWMS
with more than one worker, keras-team/keras#20585). PreemptionCheckpointHandler does not support
ParameterServerStrategy (it raises NotImplementedError when the cluster has a `ps` job).
"""

import argparse
import hashlib
import json
import os
import shutil
import time

import keras
import numpy as np
import tensorflow as tf

SEED = 1234
PER_WORKER_BATCH = 32
THROTTLE_S = 0.5


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="steps to train in all")
    parser.add_argument("--throttle-file", default="", help="pause 0.5 s after each step while it exists")
    return parser.parse_args()


def checkpoint_dir() -> str:
    explicit = os.environ.get("CHECKPOINT_DIR", "")
    if explicit:
        return explicit
    work = os.environ.get("TFDECLARE_WORK_DIR", "")
    if work:
        return os.path.join(os.path.dirname(os.path.abspath(work)), "checkpoints")
    return os.path.abspath("checkpoints")


def weights_sha256(variables: list[tf.Variable]) -> str:
    """sha256 over the float32 bytes of the variables, in the order given."""
    digest = hashlib.sha256()
    for v in variables:
        digest.update(np.asarray(v.numpy(), dtype="<f4").tobytes())
    return digest.hexdigest()


def write_whole(path: str, text: str) -> None:
    """Write ``path`` by a rename: a reader never sees it half-written."""
    tmp = f"{path}.{os.getpid()}.tmp"  # workers sharing a folder (Mesos) each write their own
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def main() -> None:
    args = parse_args()
    keras.utils.set_random_seed(SEED)  # the same initial weights on every run
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    attempt = os.environ.get("TFDECLARE_ATTEMPT", "0")
    print(f"TASK {task.get('type', 'local')}:{task.get('index', 0)} attempt {attempt} starting", flush=True)

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    replicas = strategy.num_replicas_in_sync
    global_batch = PER_WORKER_BATCH * replicas

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(16,)),
                keras.layers.Dense(32, activation="relu"),
                keras.layers.Dense(1, activation="sigmoid"),
            ]
        )
        optimizer = keras.optimizers.SGD(learning_rate=0.5)
        optimizer.build(model.trainable_variables)  # create the slots before tracing
        # The step lives in the checkpoint (the handler's own run counter is not kept).
        step = tf.Variable(0, dtype=tf.int64, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    folder = checkpoint_dir()
    # Restores the latest checkpoint of `folder`, if any; watches for SIGTERM from now on.
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(resolver, checkpoint, folder)
    if int(step.numpy()):
        print(f"RESUMED at step {int(step.numpy())} from {folder}", flush=True)

    @tf.function
    def train_step(n: tf.Tensor) -> tf.Tensor:
        def step_fn() -> tf.Tensor:
            # Step n's global batch depends on n alone; each replica takes its own slice of it.
            x = tf.random.stateless_uniform(
                [global_batch, 16], seed=tf.stack([tf.constant(SEED, tf.int64), n])
            )
            y = tf.cast(tf.reduce_sum(x, axis=1, keepdims=True) > 8.0, tf.float32)
            first = tf.distribute.get_replica_context().replica_id_in_sync_group * PER_WORKER_BATCH
            features, labels = x[first : first + PER_WORKER_BATCH], y[first : first + PER_WORKER_BATCH]
            with tf.GradientTape() as tape:
                probs = model(features, training=True)
                per_example = keras.losses.binary_crossentropy(labels, probs)
                # Divide by the GLOBAL batch: the all-reduce sums the replicas' gradients.
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step_fn), axis=None)

    def one_step() -> float:
        n = int(step.numpy()) + 1
        loss = float(train_step(tf.constant(n, tf.int64)))
        if not np.isfinite(loss):
            raise RuntimeError(f"loss is {loss} at step {n}")
        step.assign(n)
        with open("steps.log", "a") as log:  # this task's working folder
            log.write(f"{n} {attempt}\n")
        print(f"STEP {n} loss={loss:.4f}", flush=True)
        return loss

    while int(step.numpy()) < args.steps:
        # Before each step the handler looks for a termination signal; after one it saves a
        # checkpoint (the step counter with it) at a step all workers agree on and exits.
        handler.run(one_step)
        if args.throttle_file and os.path.exists(args.throttle_file):
            time.sleep(THROTTLE_S)

    digest = weights_sha256(model.trainable_variables)
    write_whole("final_weights.sha256", digest + "\n")
    print(f"FINAL_WEIGHTS_SHA256 {digest}", flush=True)
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    if resolver.task_type == "chief" or (
        resolver.task_type in ("worker", None) and not has_chief and not resolver.task_id
    ):
        shutil.rmtree(folder, ignore_errors=True)  # the next run starts from scratch


if __name__ == "__main__":
    main()
