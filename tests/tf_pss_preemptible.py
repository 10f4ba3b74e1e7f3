"""ParameterServerStrategy training that saves on SIGTERM: the ParameterServerStrategy half of
tests/test_preemption_tensorflow.py (issue 34).

    python tf_pss_preemptible.py STEPS [THROTTLE_FILE]

TF 2.21's ``PreemptionCheckpointHandler`` refuses a cluster with ``ps`` tasks, so the chief
(the coordinator) does it itself: a SIGTERM handler sets a flag, and before the next step the
chief saves a ``tf.train.CheckpointManager`` checkpoint (the step counter in it) into
``checkpoints/`` of its working folder (an absolute path: the ps writes the variables it holds,
so on several machines this must be a shared folder) and exits 42. The variables live on the ps, so the ps
must outlive the chief's SIGTERM: tfdeclare stops a job with ps roles chief first and its ps
and workers once the chief has exited; they are plain TensorFlow servers here, which die at
once on SIGTERM (they install no handler). One worker and a ``join()`` after every step keep the steps
in order, so the final weights do not depend on timing; the batch of step n depends on n alone.

The chief writes ``steps.log`` (``STEP ATTEMPT`` per step done) and ``final_weights.sha256``
in its working folder, and prints ``RESUMED at step n`` after a restore. While THROTTLE_FILE
exists it waits 0.5 s after each step.
"""

import hashlib
import os
import shutil
import signal
import sys
import time

import keras
import numpy as np
import tensorflow as tf

SEED = 1234
BATCH = 32


def serve(resolver: tf.distribute.cluster_resolver.TFConfigClusterResolver) -> None:
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id, protocol="grpc"
    )
    server.join()


def train(
    resolver: tf.distribute.cluster_resolver.TFConfigClusterResolver, steps: int, throttle: str
) -> None:
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    attempt = os.environ.get("TFDECLARE_ATTEMPT", "0")
    keras.utils.set_random_seed(SEED)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(16,)),
                keras.layers.Dense(32, activation="relu"),
                keras.layers.Dense(1, activation="sigmoid"),
            ]
        )
        optimizer = keras.optimizers.SGD(learning_rate=0.5)
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    # Absolute: the ps writes the variables it holds, from its own working folder.
    folder = os.path.abspath("checkpoints")
    manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=1)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint)
        print(f"RESUMED at step {int(step.numpy())}", flush=True)

    @tf.function
    def train_step(n: tf.Tensor) -> tf.Tensor:
        def step_fn(n: tf.Tensor) -> tf.Tensor:
            x = tf.random.stateless_uniform([BATCH, 16], seed=tf.stack([tf.constant(SEED, tf.int64), n]))
            y = tf.cast(tf.reduce_sum(x, axis=1, keepdims=True) > 8.0, tf.float32)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(keras.losses.binary_crossentropy(y, model(x, training=True)))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.run(step_fn, args=(n,))

    while int(step.numpy()) < steps:
        if stopping:
            manager.save()
            print(f"SAVED at step {int(step.numpy())}", flush=True)
            sys.exit(42)
        n = int(step.numpy()) + 1
        coordinator.schedule(train_step, args=(tf.constant(n, tf.int64),))
        coordinator.join()
        step.assign(n)
        with open("steps.log", "a") as log:
            log.write(f"{n} {attempt}\n")
        print(f"STEP {n}", flush=True)
        if throttle and os.path.exists(throttle):
            time.sleep(0.5)

    digest = hashlib.sha256()
    for v in model.trainable_variables:
        digest.update(np.asarray(v.numpy(), dtype="<f4").tobytes())
    with open("final_weights.sha256.tmp", "w") as handle:
        handle.write(digest.hexdigest() + "\n")
    os.replace("final_weights.sha256.tmp", "final_weights.sha256")
    shutil.rmtree(folder, ignore_errors=True)
    print(f"FINAL_WEIGHTS_SHA256 {digest.hexdigest()}", flush=True)


def main() -> None:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        serve(resolver)
    else:
        train(resolver, int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "")


if __name__ == "__main__":
    main()
