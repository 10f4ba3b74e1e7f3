"""A ParameterServerStrategy job of a fixed number of steps, for the restart-scope test and
benchmark (issue 24): chief (coordinator) + ps + workers, every task runs this script.

- ps and workers serve until the runner stops them.
- The chief schedules ``STEPS`` steps in rounds of ``STEPS_PER_ROUND`` on whichever worker
  is free (a lost worker's closures are put back and run elsewhere, and a worker restarted
  at its address rejoins), prints ``STEP n loss=...`` after each round, and at the end
  ``FINAL_LOSS x`` (the model on a fixed evaluation set) and ``DONE steps=n``.
- It saves a checkpoint after every round (``CKPT_DIR``, default ``ckpt/`` in its working
  folder; the ps tasks write their shards there too, so all share the machine or a shared
  folder) and restores the newest at start (``RESTORED step=n``), as a PSS chief must to
  survive a whole-job restart.
- ``GATE_AT`` (a step) and ``GATE_FILE``: after that round it prints ``PAUSED`` and waits
  until the file exists (the test checks the cluster then; the wait has a deadline).
- ``WIDTH`` (hidden units, default 32) sets the work per step.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

SEED = 1234
STEPS = int(os.environ.get("STEPS", "80"))
STEPS_PER_ROUND = int(os.environ.get("STEPS_PER_ROUND", "10"))
WIDTH = int(os.environ.get("WIDTH", "32"))
BATCH = 32
LEARNING_RATE = float(os.environ.get("LEARNING_RATE", "0.1"))
GATE_DEADLINE_S = 600.0


def serve(resolver: tf.distribute.cluster_resolver.TFConfigClusterResolver) -> None:
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    restarts = os.environ.get("TFDECLARE_TASK_RESTARTS", "0")
    print(
        f"TASK {resolver.task_type}-{resolver.task_id} serving pid={os.getpid()} restarts={restarts}",
        flush=True,
    )
    server.join()


def data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((rows, 16), dtype=np.float32)
    return x, (x.sum(axis=1, keepdims=True) > 8).astype(np.float32)


def gate(step: int) -> None:
    at, path = os.environ.get("GATE_AT"), os.environ.get("GATE_FILE")
    if at is None or path is None or step != int(at):
        return
    print(f"PAUSED step={step}", flush=True)
    deadline = time.monotonic() + GATE_DEADLINE_S
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} did not appear within {GATE_DEADLINE_S:g} s")
        time.sleep(0.1)
    print(f"RESUMED step={step}", flush=True)


def train(resolver: tf.distribute.cluster_resolver.TFConfigClusterResolver) -> None:
    tf.get_logger().setLevel("INFO")  # the coordinator says when a worker fails and recovers
    keras.utils.set_random_seed(SEED)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(16,)),
                keras.layers.Dense(WIDTH, activation="relu"),
                keras.layers.Dense(1, activation="sigmoid"),
            ]
        )
        optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE)
        optimizer.build(model.trainable_variables)
        done = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, done=done)
    # An absolute path: the ps tasks write their shards of it themselves.
    folder = os.environ.get("CKPT_DIR") or os.path.abspath("ckpt")
    manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=1)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint)
        print(f"RESTORED step={int(done.numpy())}", flush=True)

    def dataset_fn() -> tf.data.Dataset:
        x, y = data(1024, SEED)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024, seed=SEED).repeat()
        return ds.batch(BATCH, drop_remainder=True)

    per_worker = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train_step(iterator: tf.data.Iterator) -> tf.Tensor:
        def step_fn(features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    keras.losses.binary_crossentropy(labels, model(features, training=True))
                )
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        features, labels = next(iterator)
        return strategy.run(step_fn, args=(features, labels))

    step = int(done.numpy())
    while step < STEPS:
        losses = [coordinator.schedule(train_step, args=(per_worker,)) for _ in range(STEPS_PER_ROUND)]
        coordinator.join()
        step += STEPS_PER_ROUND
        done.assign(step)
        manager.save()
        print(f"STEP {step} loss={float(np.mean([loss.fetch() for loss in losses])):.4f}", flush=True)
        gate(step)

    x, y = data(512, SEED + 1)
    final = float(tf.reduce_mean(keras.losses.binary_crossentropy(y, model(x, training=False))))
    print(f"FINAL_LOSS {final:.4f}", flush=True)
    print(f"DONE steps={step}", flush=True)


def main() -> None:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        serve(resolver)
    elif resolver.task_type == "chief":
        train(resolver)
    else:
        raise SystemExit(f"unexpected task type {resolver.task_type!r}")


if __name__ == "__main__":
    main()
