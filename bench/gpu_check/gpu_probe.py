"""One task of the GPU check: report which GPU this task sees, and train on it briefly.

Prints ``GPU_PROBE {"visible": "...", "count": N, "uuids": [...], "trained": true|false,
"steps_per_s": X}``. Uses PyTorch when the Python it runs under has it (what the GPU machines
here carry), else TensorFlow (the images of images/, for the check in containers); the check
is about tfdeclare's device plumbing (``CUDA_VISIBLE_DEVICES`` for a process, one device
request for a container), not about the framework. ``visible`` is what the task was told:
``CUDA_VISIBLE_DEVICES`` (a process) or ``NVIDIA_VISIBLE_DEVICES`` (a container, host ids).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time

STEPS = 200


def _uuids_from_nvidia_smi() -> list[str]:
    try:
        listing = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return []
    return [line.split("UUID: ")[1].rstrip(")") for line in listing.stdout.splitlines() if "UUID: " in line]


def probe_torch() -> tuple[int, list[str], bool, float | None]:
    import torch

    count = torch.cuda.device_count()
    uuids = [str(torch.cuda.get_device_properties(i).uuid) for i in range(count)]
    if not count:
        return count, uuids, False, None
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 64, device="cuda"), torch.randn(256, 1, device="cuda")
    started = time.perf_counter()
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    return count, uuids, bool(torch.isfinite(loss).item()), STEPS / (time.perf_counter() - started)


def probe_tensorflow() -> tuple[int, list[str], bool, float | None]:
    import tensorflow as tf

    count = len(tf.config.list_physical_devices("GPU"))
    uuids = _uuids_from_nvidia_smi() if count else []
    if not count:
        return count, uuids, False, None
    with tf.device("/GPU:0"):
        w = tf.Variable(tf.random.normal((64, 1)))
        x, y = tf.random.normal((256, 64)), tf.random.normal((256, 1))
        optimizer = tf.keras.optimizers.SGD(0.01)

        @tf.function
        def step() -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((x @ w - y) ** 2)
            optimizer.apply_gradients([(tape.gradient(loss, w), w)])
            return loss

        step()  # traced outside the timing
        started = time.perf_counter()
        for _ in range(STEPS):
            loss = step()
        finite = bool(tf.math.is_finite(loss).numpy())
    return count, uuids, finite, STEPS / (time.perf_counter() - started)


def main() -> None:
    probe = probe_torch if importlib.util.find_spec("torch") else probe_tensorflow
    count, uuids, trained, steps_per_s = probe()
    report = {
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES", os.environ.get("NVIDIA_VISIBLE_DEVICES")),
        "count": count,
        "uuids": uuids,
        "trained": trained,
        "steps_per_s": round(steps_per_s, 1) if steps_per_s else None,
    }
    print("GPU_PROBE " + json.dumps(report), flush=True)
    time.sleep(float(os.environ.get("PROBE_LINGER", "0")))  # GPU workers outlast the CPU probe


if __name__ == "__main__":
    main()
