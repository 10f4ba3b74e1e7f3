"""A fixed TensorFlow training workload that reports its own steady-state cost per step.

    STEPS_PER_SECOND <float>        wall clock (depends on whatever else the machine runs)
    CPU_SECONDS_PER_STEP <float>    this process's CPU time (all its threads), user + system

Run by hand and as a tfdeclare task, it measures what the runner costs a training job
(nothing should run between the task and the CPU while it trains). TensorFlow runs with one
intra-op and one inter-op thread, so no idle pool thread spins on a busy machine and the CPU
time is the work of the steps.

With ``BENCH_SYNC_DIR`` set, it writes ``ready-<pid>`` there after its warm-up and measures
only once ``go`` exists: the benchmark starts the copy by hand and the copy under tfdeclare
so that they measure at the same time, on the same machine state.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

WARMUP_STEPS = 50
MEASURED_STEPS = 3000


def main() -> None:
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
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
    sync = os.environ.get("BENCH_SYNC_DIR")
    if sync:
        (Path(sync) / f"ready-{os.getpid()}").touch()
        while not (Path(sync) / "go").exists():
            time.sleep(0.002)
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(MEASURED_STEPS):
        loss = train_step()
    float(loss)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    print(f"STEPS_PER_SECOND {MEASURED_STEPS / elapsed:.2f}", flush=True)
    print(f"CPU_SECONDS_PER_STEP {cpu / MEASURED_STEPS:.9f}", flush=True)


if __name__ == "__main__":
    main()
