"""Synchronous data-parallel training with MultiWorkerMirroredStrategy (MWMS).

Every worker runs this same script; tfdeclare gives each one its place in the cluster via
TF_CONFIG, e.g. {"cluster": {"worker": ["h:p0", "h:p1"]}, "task": {"type": "worker", "index": 1}}.
Worker 0 acts as the chief. Each step, every worker computes gradients on its own shard of the
batch, the gradients are all-reduced, and all workers apply the same update, so the weights stay
identical everywhere: the FINAL_WEIGHTS_SHA256 line printed at the end is the same on every worker.

Keras 3 layers and optimizer with a custom training loop: Keras 3 `model.fit` does not work
under MWMS with more than one worker (keras-team/keras#20585).
"""

import hashlib
import json
import os

import keras
import numpy as np
import tensorflow as tf

SEED = 1234
STEPS = 20
PER_WORKER_BATCH = 32


def make_data() -> tuple[np.ndarray, np.ndarray]:
    """A tiny synthetic binary task: is the sum of 16 uniform features above 8?"""
    rng = np.random.default_rng(SEED)  # same seed everywhere: all workers see the same data
    x = rng.random((1024, 16), dtype=np.float32)
    y = (x.sum(axis=1, keepdims=True) > 8).astype(np.float32)
    return x, y


def weights_sha256(variables: list[tf.Variable]) -> str:
    """sha256 over the float32 bytes of the variables, in the order given."""
    digest = hashlib.sha256()
    for v in variables:
        digest.update(np.asarray(v.numpy(), dtype="<f4").tobytes())
    return digest.hexdigest()


def main() -> None:
    keras.utils.set_random_seed(SEED)  # seeds Python, NumPy and TensorFlow
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    print(f"TASK {task.get('type', 'local')}:{task.get('index', 0)} starting", flush=True)

    # Reads TF_CONFIG; blocks until every worker of the cluster has connected.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    global_batch = PER_WORKER_BATCH * workers

    x, y = make_data()

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        # Each worker reads its own shard and batches it with the per-worker batch size.
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        ds = ds.shuffle(1024, seed=SEED).repeat()
        return ds.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)

    dist_ds = strategy.distribute_datasets_from_function(dataset_fn)

    # Variables created under the scope are mirrored on every worker.
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

    @tf.function
    def train_step(batch: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        def step_fn(features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                probs = model(features, training=True)
                per_example = keras.losses.binary_crossentropy(labels, probs)
                # Divide by the GLOBAL batch: the all-reduce sums the workers' gradients.
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))  # all-reduces grads
            return loss

        per_replica = strategy.run(step_fn, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    iterator = iter(dist_ds)
    for step in range(1, STEPS + 1):
        loss = float(train_step(next(iterator)))
        if not np.isfinite(loss):
            raise RuntimeError(f"loss is {loss} at step {step}")
        print(f"STEP {step} loss={loss:.4f}", flush=True)

    print(f"FINAL_WEIGHTS_SHA256 {weights_sha256(model.trainable_variables)}", flush=True)


if __name__ == "__main__":
    main()
