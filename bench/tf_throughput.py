"""A fixed TensorFlow training workload that reports its own steady-state throughput.

    STEPS_PER_SECOND <float>

Run by hand and as a tfdeclare task, it measures what the runner costs a training job
(nothing should run between the task and the CPU while it trains).
"""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf

WARMUP_STEPS = 50
MEASURED_STEPS = 4000


def main() -> None:
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(256, 64)).astype("float32"))
    y = tf.constant((rng.normal(size=(256, 1)) > 0).astype("float32"))
    layers = [tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(1)]
    model = tf.keras.Sequential(layers)
    optimizer = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function
    def train_step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    for _ in range(WARMUP_STEPS):
        train_step()
    started = time.perf_counter()
    for _ in range(MEASURED_STEPS):
        loss = train_step()
    float(loss)
    elapsed = time.perf_counter() - started
    print(f"STEPS_PER_SECOND {MEASURED_STEPS / elapsed:.2f}", flush=True)


if __name__ == "__main__":
    main()
