#!/bin/sh
# The GPU check of issues 3 and 13, for a machine with NVIDIA GPUs (run from the repository
# root): every GPU task sees exactly its own device and trains on it (printing its steps/s);
# a CPU task sees none.
#   sh bench/gpu_check/run.sh              tasks as processes (Python with PyTorch or TensorFlow)
#   IMAGE=tfdeclare-examples:2.21.0-gpu sh bench/gpu_check/run.sh
#                                          tasks as containers of IMAGE (make images; needs the
#                                          Docker engine and the NVIDIA Container Toolkit)
# Needs Python with PyYAML (and the docker package for containers); tfdeclare runs from the
# source tree.
set -eu
gpus=$(nvidia-smi -L | grep -c '^GPU ')
workers=$(( gpus < 2 ? gpus : 2 ))
work=$(mktemp -d)
cp bench/gpu_check/gpu_probe.py "$work/"
cat > "$work/gpu.yaml" <<SPEC
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {name: gpu-check}
spec:
  command: [python3, gpu_probe.py]${IMAGE:+
  image: $IMAGE}
  replicas:
    worker: {count: $workers, resources: {cpus: 1, mem: 4Gi, gpus: 1}, env: {PROBE_LINGER: "10"}}
    evaluator: {count: 1, resources: {cpus: 1, mem: 2Gi}}
SPEC
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
cd "$work"
python3 -m tfdeclare apply gpu.yaml --wait --timeout 300
for task in evaluator:0 $(seq -s ' ' -f 'worker:%g' 0 $((workers - 1))); do
  python3 -m tfdeclare logs gpu-check --task "$task" | grep '^GPU_PROBE' | sed "s/^/$task /"
done | tee "$work/probes.txt"
python3 - "$work/probes.txt" "$workers" <<'PY'
import json, sys
probes = {line.split()[0]: json.loads(line.split(" ", 2)[2]) for line in open(sys.argv[1])}
workers = [p for task, p in probes.items() if task.startswith("worker")]
assert probes["evaluator:0"]["count"] == 0, probes["evaluator:0"]
assert len(workers) == int(sys.argv[2]) and all(p["count"] == 1 and p["trained"] for p in workers), workers
assert len({p["uuids"][0] for p in workers}) == len(workers), "two tasks shared a GPU"
print(f"GPU CHECK PASSED: {len(workers)} GPU task(s), each on its own device; the CPU task saw none")
for p in workers:
    print(f"  device {p['uuids'][0]}: {p['steps_per_s']} steps/s")
PY
