"""A fixed TensorFlow training workload that reports its own steady-state cost per step.

    STEPS_PER_SECOND <float>        wall clock (depends on whatever else the machine runs)
    CPU_SECONDS_PER_STEP <float>    this process's CPU time (all its threads, user + system),
                                    the median over blocks of 100 steps

Run by hand and as a tfdeclare task, it measures what the runner costs a training job
(nothing should run between the task and the CPU while it trains). TensorFlow runs with one
intra-op and one inter-op thread, so no idle pool thread spins on a busy machine and the CPU
time is the work of the steps. The median over blocks keeps a moment of interference (another
process sharing the core's caches) from moving the result.

With ``BENCH_SYNC_DIR`` and ``BENCH_ROLE`` (``hand`` or ``through``) set, two copies take
turns: after its warm-up each writes ``ready-<role>`` there, then runs a block only when it
holds the turn (a byte on the FIFO ``<role>.turn``) and passes it on to the other after the
block. The copy by hand and the copy under tfdeclare thus measure in alternate blocks of a
tenth of a second, on the same machine state, never competing with each other.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorflow as tf

WARMUP_STEPS = 50
MEASURED_STEPS = 3000
BLOCK_STEPS = 100


def _turns() -> tuple[Callable[[], None], Callable[[], None]]:
    """(wait for my turn, give it to the other copy); both no-ops when running alone."""
    sync, role = os.environ.get("BENCH_SYNC_DIR"), os.environ.get("BENCH_ROLE")
    if not sync or not role:
        return (lambda: None), (lambda: None)
    other = "through" if role == "hand" else "hand"
    mine = os.open(Path(sync) / f"{role}.turn", os.O_RDWR)  # O_RDWR: opening never blocks
    theirs = os.open(Path(sync) / f"{other}.turn", os.O_RDWR)
    (Path(sync) / f"ready-{role}").touch()

    def take() -> None:
        os.read(mine, 1)

    def give() -> None:
        os.write(theirs, b"t")

    return take, give


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
    take_turn, pass_turn = _turns()
    elapsed = 0.0
    cpu_per_step = []
    for _ in range(MEASURED_STEPS // BLOCK_STEPS):
        take_turn()
        started, cpu_started = time.perf_counter(), time.process_time()
        for _ in range(BLOCK_STEPS):
            loss = train_step()
        float(loss)  # the block's steps have run
        cpu_per_step.append((time.process_time() - cpu_started) / BLOCK_STEPS)
        elapsed += time.perf_counter() - started
        pass_turn()
    print(f"STEPS_PER_SECOND {MEASURED_STEPS / elapsed:.2f}", flush=True)
    print(f"CPU_SECONDS_PER_STEP {statistics.median(cpu_per_step):.9f}", flush=True)


if __name__ == "__main__":
    main()
