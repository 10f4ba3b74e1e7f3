"""One task of the GPU check: report which GPU this task sees, and train on it briefly.

Prints ``GPU_PROBE {"visible": "...", "count": N, "uuids": [...], "trained": true|false}``.
Uses PyTorch (what the GPU machines here carry); the check is about tfdeclare's device
plumbing (``CUDA_VISIBLE_DEVICES``), not about the framework.
"""

from __future__ import annotations

import json
import os
import time

import torch


def main() -> None:
    count = torch.cuda.device_count()
    uuids = [str(torch.cuda.get_device_properties(i).uuid) for i in range(count)]
    trained = False
    if count:
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(256, 64, device="cuda"), torch.randn(256, 1, device="cuda")
        for _ in range(50):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        torch.cuda.synchronize()
        trained = bool(torch.isfinite(loss).item())
    report = {
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "count": count,
        "uuids": uuids,
        "trained": trained,
    }
    print("GPU_PROBE " + json.dumps(report), flush=True)
    time.sleep(float(os.environ.get("PROBE_LINGER", "0")))  # GPU workers outlast the CPU probe


if __name__ == "__main__":
    main()
