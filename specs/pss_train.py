"""Asynchronous training with ParameterServerStrategy (PSS): chief + ps + workers.

All tasks run this same script and read their role from TF_CONFIG:
- ps and worker tasks only start a TensorFlow server and serve forever; the job runner stops
  them once the chief is done.
- the chief (the "coordinator") creates the variables on the ps tasks, then schedules training
  steps as functions that run on whichever worker is free, and exits 0 when training is done.
  Its exit code is the job's result.

Keras 3 layers and optimizer with a custom loop: Keras 3 `model.fit` does not support PSS
(keras-team/keras#18624). Do not set TF_NUM_INTEROP_THREADS=1 for PSS tasks: it deadlocks.
"""

import keras
import numpy as np
import tensorflow as tf

SEED = 1234
ROUNDS = 4
STEPS_PER_ROUND = 10
PER_WORKER_BATCH = 32


def serve(resolver: tf.distribute.cluster_resolver.TFConfigClusterResolver) -> None:
    """ps / worker: host variables or run scheduled steps until the runner stops us."""
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    print(f"TASK {resolver.task_type}:{resolver.task_id} serving at {server.target}", flush=True)
    server.join()  # never returns


def train(resolver: tf.distribute.cluster_resolver.TFConfigClusterResolver) -> None:
    """chief: coordinate the training and return when it is done."""
    keras.utils.set_random_seed(SEED)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    workers = resolver.cluster_spec().num_tasks("worker")
    print(f"TASK chief-0 coordinating {workers} workers", flush=True)

    # Variables created under the scope live on the ps tasks. Build the optimizer here too,
    # so that its variables exist before train_step is traced.
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

    def dataset_fn() -> tf.data.Dataset:
        # Runs on every worker. Each one reads the same data in the same seeded order; a real
        # job would give each worker its own files.
        rng = np.random.default_rng(SEED)
        x = rng.random((1024, 16), dtype=np.float32)
        y = (x.sum(axis=1, keepdims=True) > 8).astype(np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024, seed=SEED).repeat()
        return ds.batch(PER_WORKER_BATCH, drop_remainder=True)

    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train_step(iterator: tf.data.Iterator) -> tf.Tensor:
        def step_fn(features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                probs = model(features, training=True)
                loss = tf.reduce_mean(keras.losses.binary_crossentropy(labels, probs))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        features, labels = next(iterator)
        return strategy.run(step_fn, args=(features, labels))

    for round_ in range(1, ROUNDS + 1):
        # schedule() returns at once; the step runs on a free worker. join() waits for all.
        losses = [
            coordinator.schedule(train_step, args=(per_worker_iterator,)) for _ in range(STEPS_PER_ROUND)
        ]
        coordinator.join()
        mean_loss = float(np.mean([loss.fetch() for loss in losses]))
        if not np.isfinite(mean_loss):
            raise RuntimeError(f"loss is {mean_loss} in round {round_}")
        # Count steps here, not with optimizer.iterations: Keras 3 increments that counter with
        # a read and a write, so steps running concurrently on several workers lose increments.
        print(f"STEP {round_ * STEPS_PER_ROUND} loss={mean_loss:.4f}", flush=True)

    # Steps ran asynchronously on whichever worker was free: unlike MWMS, the final weights
    # depend on timing and are not bit-reproducible.
    print(f"DONE steps={ROUNDS * STEPS_PER_ROUND}", flush=True)


def main() -> None:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        serve(resolver)
    elif resolver.task_type == "chief":
        train(resolver)
    else:
        raise SystemExit(f"unexpected task type {resolver.task_type!r} in TF_CONFIG")


if __name__ == "__main__":
    main()
