"""TF1-style between-graph replication, launched with TFMesos-style command-line flags.

    python legacy_train.py --ps_hosts=h:p0 --worker_hosts=h:p1,h:p2 --job_name=worker --task_index=1

The ps task holds the variables and serves forever (the job runner stops it). Every worker
builds its own copy of the graph, trains asynchronously against the shared variables until the
global step reaches --last_step, and exits 0. Worker 0 is the chief: it initializes the
variables. Uses only `tf.compat.v1` graph-mode APIs that work with Keras 3 installed
(`tf.compat.v1.layers` would need tf_keras).
"""

import argparse
import time

import numpy as np
import tensorflow as tf

SEED = 1234
BATCH = 32


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ps_hosts", required=True, help="comma-separated host:port list")
    parser.add_argument("--worker_hosts", required=True, help="comma-separated host:port list")
    parser.add_argument("--job_name", required=True, choices=["ps", "worker"])
    parser.add_argument("--task_index", required=True, type=int)
    parser.add_argument("--last_step", type=int, default=200, help="global step to stop at")
    return parser.parse_args()


def build_model(features: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Operation, tf.Variable]:
    """Dense(32, relu) -> Dense(1) from plain variables; returns (loss, train_op, global_step)."""
    init = tf.compat.v1.glorot_uniform_initializer(seed=SEED)
    w1 = tf.compat.v1.get_variable("w1", [16, 32], initializer=init)
    b1 = tf.compat.v1.get_variable("b1", [32], initializer=tf.compat.v1.zeros_initializer())
    w2 = tf.compat.v1.get_variable("w2", [32, 1], initializer=init)
    b2 = tf.compat.v1.get_variable("b2", [1], initializer=tf.compat.v1.zeros_initializer())
    hidden = tf.nn.relu(tf.matmul(features, w1) + b1)
    logits = tf.matmul(hidden, w2) + b2
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    global_step = tf.compat.v1.train.get_or_create_global_step()
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=global_step)
    return loss, train_op, global_step


class FinalStepHook(tf.compat.v1.train.SessionRunHook):
    """Reads the global step when the session ends (no run() is allowed after should_stop)."""

    def __init__(self, global_step: tf.Variable) -> None:
        self.global_step = global_step
        self.value = -1

    def end(self, session: tf.compat.v1.Session) -> None:
        self.value = int(session.run(self.global_step))


def main() -> None:
    args = parse_args()
    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.set_random_seed(SEED)
    cluster = tf.compat.v1.train.ClusterSpec(
        {"ps": args.ps_hosts.split(","), "worker": args.worker_hosts.split(",")}
    )

    if args.job_name == "ps":
        server = tf.compat.v1.train.Server(cluster, job_name="ps", task_index=args.task_index)
        print(f"TASK ps:{args.task_index} serving at {server.target}", flush=True)
        server.join()  # never returns
        return

    # A worker only talks to the ps tasks and itself. Without this filter a non-chief worker
    # waits for every other worker, and hangs forever once the chief has finished and exited.
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{args.task_index}"])
    server = tf.compat.v1.train.Server(cluster, job_name="worker", task_index=args.task_index, config=config)
    is_chief = args.task_index == 0
    print(f"TASK worker:{args.task_index} (chief={is_chief}) at {server.target}", flush=True)

    # Variables go to the ps tasks, everything else stays on this worker.
    device_fn = tf.compat.v1.train.replica_device_setter(
        worker_device=f"/job:worker/task:{args.task_index}", cluster=cluster
    )
    with tf.compat.v1.device(device_fn):
        features = tf.compat.v1.placeholder(tf.float32, [None, 16])
        labels = tf.compat.v1.placeholder(tf.float32, [None, 1])
        loss, train_op, global_step = build_model(features, labels)

    if not is_chief:
        # A non-chief that finds the variables uninitialized makes MonitoredTrainingSession sleep
        # 30 s (SessionManager's recovery_wait_secs, not configurable there) before looking again.
        # Poll cheaply until the chief has initialized them, so that the first look succeeds.
        with tf.compat.v1.device(device_fn):
            uninitialized = tf.compat.v1.report_uninitialized_variables(tf.compat.v1.global_variables())
        with tf.compat.v1.Session(server.target, config=config) as sess:
            while sess.run(uninitialized).size:
                time.sleep(0.2)

    rng = np.random.default_rng(SEED + args.task_index)  # each worker draws its own batches
    local_steps = 0
    final_step = FinalStepHook(global_step)
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=args.last_step), final_step]
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target, is_chief=is_chief, hooks=hooks, config=config
    ) as sess:
        while not sess.should_stop():
            x = rng.random((BATCH, 16), dtype=np.float32)
            y = (x.sum(axis=1, keepdims=True) > 8).astype(np.float32)
            _, loss_value, step = sess.run([train_op, loss, global_step], {features: x, labels: y})
            local_steps += 1
            if local_steps % 20 == 0:
                print(f"STEP {step} loss={loss_value:.4f}", flush=True)
    print(f"FINAL_GLOBAL_STEP {final_step.value} local_steps={local_steps}", flush=True)


if __name__ == "__main__":
    main()
