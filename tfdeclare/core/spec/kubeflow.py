"""Kubeflow ``kubeflow.org/v1`` ``TFJob`` manifests -> our ``tfdeclare/v1`` document.

Also ``v1beta2``, ``v1beta1`` and ``v1alpha2``, whose TFJobs have v1's fields and defaults
(``SAME_FIELDS_AS_V1``); ``v1alpha1`` and unknown versions are one error saying what to change.

Pure: plain values in (as ``documents`` parses them, or ruamel's round-trip tree for
``convert``), a ``Translation`` out — the native document, where each of its parts came from
(so errors found later point at the manifest's own line), and what could not be carried
over, each a warning at its JSON path. Nothing is dropped silently: a field is mapped, mapped
onto one of the spec fields added for Kubeflow (per-role image, args, restartPolicy,
workingDir; successPolicy; ttlSecondsAfterFinished), or warned about. ``docs/migrating.md``
lists every field and its fate; keep the two in step.

Kubeflow's own defaults are written out where ours differ: a replica without
``restartPolicy`` is ``Never``; without ``successPolicy`` and without a chief, worker 0's
success completes the job (``successPolicy: Worker0``). Resource quantities are Kubernetes'
(``2500m`` cores, ``1G`` = 10^9 bytes, ``4Gi``); we reserve the request (the limit when no
request is given, as Kubernetes then requests the limit).

Kubernetes' meaning is kept, or where it cannot be, said at the manifest's line:

- a container without ``imagePullPolicy`` pulls as the kubelet would: ``Always`` for an image
  tagged ``:latest`` or untagged (no digest), else ``IfNotPresent`` (our default, so not
  written out); a note at the image's line says so;
- a container without a cpu or memory request (and no limit) is BestEffort in Kubernetes,
  reserving nothing; a gang must reserve something to be placed, so it gets our defaults
  (``DEFAULT_CPUS``, ``DEFAULT_MEM``) and a warning at its line naming them;
- ``emptyDir`` and ``secret`` volumes cannot be mounted; their warnings name the natural
  equivalent (the task's own writable working folder; ``secretRef`` environment values).

- ``$(NAME)`` in command, args and env values is expanded as the kubelet expands it, from the
  container's literal env values (``$$`` is one ``$``); a reference left as written is warned;
- a ``subPath`` mount is the volume's folder joined with it (never the whole volume: one that
  leaves the volume is an error); one volume may be mounted at several paths; roles mounting
  one folder at one path share one mount (read-only only when each role's is);
- the pods' ``terminationGracePeriodSeconds`` and ``priorityClassName`` are the job's.

Each warning is listed once (``Translation.warn`` drops a repeat of a path and message).

Upgrades change no plan: ``translate(..., earlier=True)`` reads a manifest as the versions
before the readings above did (but ``subPath``, a security fix that restarts such a job:
docs/migrating.md, "Upgrades"), ``Translation.reread`` says where today's reading differs,
and the loader hashes both so that a job applied from an unchanged manifest plans no change.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfdeclare.core.diagnostics import JsonPath
from tfdeclare.core.spec.kubeexpand import expand
from tfdeclare.core.spec.kubequantity import parse_cpu, parse_gpus, parse_memory_mib
from tfdeclare.core.spec.resources import MAX_MEM_MIB

API_GROUP = "kubeflow.org/"
API_VERSION = "kubeflow.org/v1"
# Earlier versions whose TFJob has v1's fields (a subset of them: no runPolicy or successPolicy
# yet), with the same defaults (replicas 1, restartPolicy Never, the container 'tensorflow',
# the port 'tfjob-port'): kubeflow/training-operator's pkg/apis/tensorflow/<version>/types.go
# and defaults.go until each was deleted (v1alpha2 in 2019, v1beta1/v1beta2 later).
SAME_FIELDS_AS_V1 = ("kubeflow.org/v1beta2", "kubeflow.org/v1beta1", "kubeflow.org/v1alpha2")
READ_VERSIONS = (API_VERSION, *SAME_FIELDS_AS_V1)
_ROLES = {"chief": "chief", "master": "chief", "ps": "ps", "worker": "worker", "evaluator": "evaluator"}
_V1ALPHA2_EVAL = "eval"  # v1alpha2's name for the evaluator until mid-2018
_TF_PORT = 2222  # Kubeflow's default TF port (its name: tfjob-port); tfdeclare assigns ports
_HOISTED = ("image", "imagePullPolicy", "command", "args", "env", "workingDir")
_RUN_POLICY = ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished")
# A pod's settings that are the job's here (each role's pod has its own in Kubernetes)
_POD_SETTINGS = ("terminationGracePeriodSeconds", "priorityClassName")
_KUBERNETES_GRACE = 30  # a pod's terminationGracePeriodSeconds when it sets none
# What a role reserves without a request: the job schema's Resources defaults (a test keeps
# them in step).
DEFAULT_CPUS = 1
DEFAULT_MEM = "2Gi"


def is_kubeflow(value: Any) -> bool:
    # ``type(...) is dict`` first: what YAML gives, and cheaper than asking the Mapping ABC
    api = value.get("apiVersion") if type(value) is dict or isinstance(value, Mapping) else None
    return isinstance(api, str) and api.startswith(API_GROUP)


@dataclass
class Translation:
    api_version: str = API_VERSION  # the manifest's, when it is one tfdeclare reads
    native: dict[str, Any] = field(default_factory=dict)
    origins: dict[JsonPath, JsonPath] = field(default_factory=dict)  # native path -> manifest path
    warnings: list[tuple[JsonPath, str]] = field(default_factory=list)
    # How a part was read where that is worth knowing but nothing is lost (a pull policy
    # written out as Kubernetes sets it): notes at the manifest's line.
    notes: list[tuple[JsonPath, str]] = field(default_factory=list)
    errors: list[tuple[JsonPath, str]] = field(default_factory=list)
    dropped: list[JsonPath] = field(default_factory=list)  # manifest parts not carried over at all
    # Native parts written out for a Kubeflow default (a replica's count, its restartPolicy):
    # their origin only locates errors, it is not what they came from.
    implied: set[JsonPath] = field(default_factory=set)
    # Where this version reads the manifest otherwise than the versions before it did (a
    # field mapped that was ignored), and how: a job applied from it by one of them keeps
    # running as applied until its file changes (``translate(..., earlier=True)``).
    reread: list[tuple[JsonPath, str]] = field(default_factory=list)

    def is_dropped(self, source: JsonPath) -> bool:
        """Whether a part of the manifest (or a part above it) was not carried over."""
        return any(source[: len(path)] == path for path in self.dropped)

    def source_of(self, path: JsonPath) -> JsonPath:
        """Where a part of the native document came from: its nearest mapped parent (list
        indexes below it carried over, as in a command's arguments)."""
        for cut in range(len(path), -1, -1):
            origin = self.origins.get(path[:cut])
            if origin is not None:
                rest = path[cut:]
                return (*origin, *rest) if all(isinstance(p, int) for p in rest) else origin
        return ()

    def native_of(self, source: JsonPath) -> JsonPath | None:
        """The native path that a part of the manifest (or its nearest mapped parent) became."""
        reverse: dict[JsonPath, JsonPath] = {}
        for native, origin in sorted(self.origins.items(), key=lambda item: len(item[0])):
            if native not in self.implied:
                reverse.setdefault(origin, native)  # the outermost native part it became
        for cut in range(len(source), -1, -1):
            if source[:cut] in reverse:
                rest = source[cut:]
                native = reverse[source[:cut]]
                return (*native, *rest) if rest and all(isinstance(p, int) for p in rest) else native
        return None


class _Translator:
    def __init__(self, earlier: bool = False) -> None:
        self.out = Translation()
        self.earlier = earlier  # read as earlier versions did (``translate``)
        # each native volume entry (by identity) -> where its parts came from in the manifest
        self.volume_origins: dict[int, dict[str, JsonPath]] = {}
        # each role's pod-level settings read as the job's: role -> (value, where)
        self.pod_settings: dict[str, dict[str, tuple[Any, JsonPath]]] = {key: {} for key in _POD_SETTINGS}
        self.container_env: dict[str, str | None] = {}  # the last container's, for subPathExpr
        self.typed: set[JsonPath] = set()  # hostPath volumes whose type was warned about (once each)

    def reread(self, path: JsonPath, message: str) -> None:
        """A part this version reads otherwise than earlier versions did (``Translation.reread``)."""
        self.out.reread.append((path, message))

    def warn(self, path: JsonPath, message: str, *, dropped: bool = True) -> None:
        """What did not map, at ``path``; ``dropped``: that part of the manifest is left out
        (not so for a warning about how a part was mapped)."""
        if (path, message) not in self.out.warnings:
            self.out.warnings.append((path, message))
        if dropped:
            self.out.dropped.append(path)

    def note(self, path: JsonPath, message: str) -> None:
        self.out.notes.append((path, message))

    def error(self, path: JsonPath, message: str) -> None:
        self.out.errors.append((path, message))

    def put(
        self, target: dict[str, Any], native: JsonPath, value: Any, origin: JsonPath, implied: bool = False
    ) -> None:
        target[str(native[-1])] = value
        self.out.origins[native] = origin
        if implied:
            self.out.implied.add(native)

    def listed(self, parent: Mapping[str, Any], key: str, at: JsonPath) -> list[Any]:
        """``parent[key]`` when it is a list (absent: empty); anything else is an error."""
        value = parent.get(key)
        if value is None or isinstance(value, list):
            return value or []
        self.error((*at, key), f"{key} must be a list")
        return []

    def mapped(self, parent: Mapping[str, Any], key: str, at: JsonPath) -> Mapping[str, Any]:
        """``parent[key]`` when it is a mapping (absent: empty); anything else is an error."""
        value = parent.get(key)
        if value is None or isinstance(value, Mapping):
            return value or {}
        self.error((*at, key), f"{key} must be a mapping")
        return {}

    def unknown(self, value: Mapping[str, Any], known: Sequence[str], at: JsonPath, what: str) -> None:
        for key in value:
            if key not in known:
                self.warn((*at, key), f"{what} field '{key}' has no tfdeclare equivalent: ignored")

    # ---- the document ------------------------------------------------------------------------

    def document(self, doc: Mapping[str, Any]) -> Translation:
        version = doc.get("apiVersion")
        if version not in READ_VERSIONS:
            self.error(("apiVersion",), _unread_version(str(version)))
            return self.out
        self.out.api_version = str(version)
        if doc.get("kind") != "TFJob":
            self.error(
                ("kind",), f"kind {doc.get('kind')!r} of {version} is not a TFJob: tfdeclare runs TFJobs"
            )
            return self.out
        native = self.out.native
        self.put(native, ("apiVersion",), "tfdeclare/v1", ("apiVersion",))
        self.put(native, ("kind",), "TFJob", ("kind",))
        self.out.origins[()] = ()
        if isinstance(doc.get("metadata"), Mapping):
            self.put(native, ("metadata",), self.metadata(doc["metadata"]), ("metadata",))
        if "status" in doc:
            self.warn(("status",), "status is written by tfdeclare (the status file): ignored")
        self.unknown(doc, ("apiVersion", "kind", "metadata", "spec", "status"), (), "top-level")
        spec = doc.get("spec")
        if not isinstance(spec, Mapping):
            self.error(("spec",), "a TFJob needs a spec with tfReplicaSpecs")
            return self.out
        self.put(native, ("spec",), self.spec(spec), ("spec",))
        return self.out

    def metadata(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        at = ("metadata",)
        if "name" in metadata:
            self.put(out, (*at, "name"), metadata["name"], (*at, "name"))
        elif isinstance(metadata.get("generateName"), str):
            name = metadata["generateName"].rstrip("-")
            self.put(out, (*at, "name"), name, (*at, "generateName"))
            self.warn(
                (*at, "generateName"),
                f"generateName: tfdeclare tracks a job by a stable name, so this job is named '{name}' "
                "(no random suffix)",
                dropped=False,
            )
        if "labels" in metadata:
            labels = metadata["labels"]
            self.put(out, (*at, "labels"), labels, (*at, "labels"))
            if isinstance(labels, dict):  # kept as they are: each label where it is written
                for key in labels:
                    self.out.origins[(*at, "labels", key)] = (*at, "labels", key)
        if "namespace" in metadata:
            self.warn(
                (*at, "namespace"),
                "namespace has no equivalent: job names are unique across everything tfdeclare loads",
            )
        if "annotations" in metadata:
            self.warn((*at, "annotations"), "annotations have no equivalent: ignored (labels are kept)")
        self.unknown(metadata, ("name", "generateName", "labels", "namespace", "annotations"), at, "metadata")
        return out

    # ---- spec --------------------------------------------------------------------------------

    def spec(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        replicas = spec.get("tfReplicaSpecs")
        if not isinstance(replicas, Mapping) or not replicas:
            self.error(
                ("spec", "tfReplicaSpecs"),
                "a TFJob needs tfReplicaSpecs (Chief/Master, PS, Worker, Evaluator)",
            )
            return out
        roles: dict[str, dict[str, Any]] = {}
        volumes: dict[str, list[dict[str, Any]]] = {}
        selectors: dict[str, Any] = {}
        for kind, replica in replicas.items():
            at = ("spec", "tfReplicaSpecs", kind)
            role = _role_of(str(kind), self.out.api_version)
            if role is None:
                self.error(at, f"unknown replica type '{kind}': one of Chief, Master, PS, Worker, Evaluator")
                continue
            if role in roles:
                self.error(at, f"'{kind}' is a second {role}: a TFJob has either Chief or Master")
                continue
            if not isinstance(replica, Mapping):
                self.error(at, f"{kind} must be a mapping with replicas and a template")
                continue
            roles[role], volumes[role], selectors[role] = self.replica(replica, at, role)
        self.hoist(out, roles)
        if roles:
            out["replicas"] = roles  # in the manifest's order (the canonical form sorts them)
            self.out.origins[("spec", "replicas")] = ("spec", "tfReplicaSpecs")
        self.restart_policies(out, roles)
        self.success_policy(out, spec.get("successPolicy"), "chief" in roles)
        run_policy = spec.get("runPolicy")
        if isinstance(run_policy, Mapping):
            self.run_policy(out, run_policy, ("spec", "runPolicy"))
        # Before runPolicy (v1 until 1.3) these stood in the spec itself.
        self.run_policy(
            out, {k: spec[k] for k in (*_RUN_POLICY, "cleanPodPolicy") if k in spec}, ("spec",), False
        )
        self.shared_volumes(out, volumes)
        self.shared_selector(out, selectors)
        self.grace(out, replicas, roles)
        self.priority_class(out, roles)
        if "enableDynamicWorker" in spec:
            self.warn(
                ("spec", "enableDynamicWorker"), "enableDynamicWorker: the cluster spec is static; ignored"
            )
        known = (
            "tfReplicaSpecs",
            "runPolicy",
            "successPolicy",
            "enableDynamicWorker",
            *_RUN_POLICY,
            "cleanPodPolicy",
        )
        self.unknown(spec, known, ("spec",), "spec")
        return out

    def hoist(self, out: dict[str, Any], roles: dict[str, dict[str, Any]]) -> None:
        """A value every role has alike becomes the job's (the native form reads as people write it)."""
        for key in _HOISTED:
            values = [entry.get(key) for entry in roles.values()]
            if roles and values[0] is not None and all(v == values[0] for v in values):
                first = next(iter(roles))
                self.move(("spec", "replicas", first, key), ("spec", key))
                out[key] = values[0]
                for role, entry in roles.items():
                    del entry[key]
                    self.move(("spec", "replicas", role, key), None)

    def move(self, native: JsonPath, to: JsonPath | None) -> None:
        """The origins at and below ``native`` now belong to ``to`` (None: dropped)."""
        for path in [p for p in self.out.origins if p[: len(native)] == native]:
            origin = self.out.origins.pop(path)
            implied = path in self.out.implied
            self.out.implied.discard(path)
            if to is not None:
                self.out.origins[(*to, *path[len(native) :])] = origin
                if implied:
                    self.out.implied.add((*to, *path[len(native) :]))

    def restart_policies(self, out: dict[str, Any], roles: dict[str, dict[str, Any]]) -> None:
        policies = [entry.get("restartPolicy") for entry in roles.values()]
        if roles and all(policy == policies[0] for policy in policies):
            first = next(iter(roles))
            self.move(("spec", "replicas", first, "restartPolicy"), ("spec", "restartPolicy"))
            out["restartPolicy"] = policies[0]
            for role, entry in roles.items():
                del entry["restartPolicy"]
                self.move(("spec", "replicas", role, "restartPolicy"), None)

    def success_policy(self, out: dict[str, Any], policy: Any, has_chief: bool) -> None:
        at = ("spec", "successPolicy")
        if policy in (None, ""):
            if not has_chief:  # Kubeflow's default: worker 0 decides
                self.put(out, at, "Worker0", at if policy is not None else ("spec",), implied=True)
        elif policy == "AllWorkers":
            self.put(out, at, "AllWorkers", at)
        else:
            self.error(at, f'successPolicy {policy!r}: Kubeflow knows "" (the default) and AllWorkers')

    def run_policy(
        self, out: dict[str, Any], policy: Mapping[str, Any], at: JsonPath, whole: bool = True
    ) -> None:
        for key in _RUN_POLICY:
            if key in policy:
                self.put(out, ("spec", key), policy[key], (*at, key))
        clean = policy.get("cleanPodPolicy")
        where = (*at, "cleanPodPolicy")
        if clean == "None":
            self.warn(
                where,
                "cleanPodPolicy None: tasks still running when the job completes (ps, evaluator) are "
                "stopped anyway; ended tasks and their logs are kept until ttlSecondsAfterFinished or delete",
            )
        elif clean == "All":
            self.warn(
                where,
                "cleanPodPolicy All: running tasks are stopped at completion, ended ones are kept with "
                "their logs; set ttlSecondsAfterFinished to delete them",
            )
        elif clean not in (None, "Running"):
            self.error(where, f"cleanPodPolicy {clean!r}: one of Running, All, None")
        if not whole:
            return
        if "suspend" in policy:  # training-operator 1.7: stops the job's pods, false resumes it
            self.put(out, ("spec", "suspend"), policy["suspend"], (*at, "suspend"))
        if "schedulingPolicy" in policy:
            self.scheduling_policy(out, policy["schedulingPolicy"], (*at, "schedulingPolicy"))
        known = (*_RUN_POLICY, "cleanPodPolicy", "schedulingPolicy", "suspend")
        self.unknown(policy, known, at, "runPolicy")

    def scheduling_policy(self, out: dict[str, Any], scheduling: Any, at: JsonPath) -> None:
        """``priorityClass`` is read as ``spec.priorityClassName`` (a class of the config's
        ``policy.priorityClasses``); the rest (minAvailable, queue, ...) is gang scheduling,
        which tfdeclare always does."""
        if isinstance(scheduling, dict) and "priorityClass" in scheduling:
            self.put(out, ("spec", "priorityClassName"), scheduling["priorityClass"], (*at, "priorityClass"))
        if isinstance(scheduling, dict) and set(scheduling) <= {"priorityClass"}:
            return
        self.warn(
            at,
            "schedulingPolicy: tfdeclare always places a job's tasks as one gang (all or none); "
            "its priorityClass is read as spec.priorityClassName (a class of the config's "
            "policy.priorityClasses)",
        )

    def grace(self, out: dict[str, Any], replicas: Mapping[str, Any], roles: dict[str, Any]) -> None:
        """The pods' ``terminationGracePeriodSeconds`` -> ``spec.terminationGracePeriodSeconds``:
        the largest of the roles' (a pod without one has Kubernetes' 30 s), so that no task
        gets less time than it had; a warning names each role given more."""
        given = self.pod_settings["terminationGracePeriodSeconds"]
        if not given:
            return
        for role, (value, where) in list(given.items()):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                self.error(where, f"terminationGracePeriodSeconds {value!r} must be a number of seconds >= 0")
                del given[role]
        if not given:
            return
        kinds = {_role_of(str(kind), self.out.api_version): str(kind) for kind in replicas}
        seconds = {role: given[role][0] if role in given else _KUBERNETES_GRACE for role in roles}
        longest = max(seconds.values())
        source = next((where for _, (value, where) in given.items() if value == longest), ("spec",))
        self.put(out, ("spec", "terminationGracePeriodSeconds"), longest, source)
        for _, where in given.values():
            self.reread(where, "the pod's terminationGracePeriodSeconds is read as the job's")
        for role, value in seconds.items():
            if value < longest:
                where = given[role][1] if role in given else ("spec", "tfReplicaSpecs", kinds.get(role, role))
                was = f"{value:g} s" + ("" if role in given else " (Kubernetes' default)")
                self.warn(
                    where,
                    f"{kinds.get(role, role)}'s grace of {was} is raised to {longest:g} s: "
                    "tfdeclare's terminationGracePeriodSeconds is the job's (the largest of its roles')",
                    dropped=False,
                )

    def priority_class(self, out: dict[str, Any], roles: dict[str, Any]) -> None:
        """The pods' ``priorityClassName`` -> ``spec.priorityClassName`` when every role's pod
        names the same class; ``runPolicy.schedulingPolicy.priorityClass`` (the gang's, read
        first) wins over it, with a warning when they differ."""
        given = self.pod_settings["priorityClassName"]
        if not given:
            return
        names = {value for value, _ in given.values()}
        first_where = next(iter(given.values()))[1]
        scheduled = out.get("priorityClassName")
        if len(names) > 1 or len(given) != len(roles):
            if scheduled is None:
                self.warn(
                    ("spec", "tfReplicaSpecs"),
                    "priorityClassName differs between replica types: a job has one priority, so "
                    "none was set; set runPolicy.schedulingPolicy.priorityClass",
                )
            else:
                for _, where in given.values():
                    self.warn(
                        where,
                        f"priorityClassName differs between replica types: the job's priority "
                        f"is runPolicy.schedulingPolicy.priorityClass {scheduled!r}",
                    )
            return
        (name,) = names
        if scheduled is not None:
            if name != scheduled:
                for _, where in given.values():
                    self.warn(
                        where,
                        f"priorityClassName {name!r} differs from runPolicy.schedulingPolicy."
                        f"priorityClass {scheduled!r}: the job's priority is {scheduled!r} (its "
                        "tasks are placed as one gang)",
                    )
            return
        if not isinstance(name, str) or not name:
            self.error(first_where, f"priorityClassName {name!r} must be the name of a priority class")
            return
        self.put(out, ("spec", "priorityClassName"), name, first_where)
        for _, where in given.values():
            self.reread(where, "the pod's priorityClassName is read as spec.priorityClassName")

    def shared_volumes(self, out: dict[str, Any], volumes: dict[str, list[dict[str, Any]]]) -> None:
        lists = [v for v in volumes.values() if v]
        if not lists:
            return
        union: list[dict[str, Any]] = []
        for entry in (e for v in lists for e in v):
            if entry not in union:
                union.append(entry)
        if not self.earlier:
            union = self.merged(union, volumes)
        if len(lists) != len(volumes) or any(v != lists[0] for v in lists):
            self.warn(
                ("spec", "tfReplicaSpecs"),
                "hostPath volumes differ between replica types: tfdeclare mounts the same volumes in "
                "every task, so every role gets all of them",
                dropped=False,
            )
        out["volumes"] = union
        for index, entry in enumerate(union):  # errors about a volume point at its manifest lines
            for part, origin in self.volume_origins.get(id(entry), {}).items():
                self.out.origins[("spec", "volumes", index, *((part,) if part else ()))] = origin

    def merged(
        self, union: list[dict[str, Any]], volumes: dict[str, list[dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """One entry for each host folder mounted at one path by several roles, read-only only
        when every role mounts it so; a warning at the read-only mount of each role that gets
        it read-write. (Two entries at one path would be refused by the spec's rules, as the
        container engine refuses two mounts at one path.)"""
        groups: dict[tuple[Any, str], list[dict[str, Any]]] = {}
        for entry in union:
            path = entry.get("containerPath")
            where = posixpath.normpath(path) if isinstance(path, str) else path
            groups.setdefault((where, entry["hostPath"]), []).append(entry)
        out: list[dict[str, Any]] = []
        for entries in groups.values():
            first = entries[0]
            if len({e["mode"] for e in entries}) == 1:
                out.append(first)
                continue
            read_only = [
                r for r, mine in volumes.items() if any(e in entries and e["mode"] == "ro" for e in mine)
            ]
            writer = next(e for e in entries if e["mode"] == "rw")
            one = {**first, "mode": "rw"}
            self.volume_origins[id(one)] = {
                **self.volume_origins.get(id(first), {}),
                **self.volume_origins.get(id(writer), {}),
            }
            out.append(one)
            for role in read_only:
                entry = next(e for e in volumes[role] if e in entries and e["mode"] == "ro")
                where = self.volume_origins.get(id(entry), {}).get("mode", ("spec", "tfReplicaSpecs"))
                self.warn(
                    where,
                    f"{first['hostPath']} is mounted at {first['containerPath']} read-only by {role} "
                    f"but read-write by another role: one mount serves every task, so {role}'s is "
                    "read-write",
                    dropped=False,
                )
                self.reread(where, "mounts of one folder at one path by several roles are one")
        return out

    def shared_selector(self, out: dict[str, Any], selectors: dict[str, Any]) -> None:
        found = [s for s in selectors.values() if s]
        if not found:
            return
        if len(found) != len(selectors) or any(s != found[0] for s in found):
            self.warn(
                ("spec", "tfReplicaSpecs"),
                "nodeSelector differs between replica types: tfdeclare's placement constraints are "
                "the job's; none were set",
                dropped=False,
            )
            return
        out["placement"] = {
            "constraints": [
                {"attribute": k, "operator": "In", "values": [str(v)]} for k, v in found[0].items()
            ]
        }

    # ---- one replica type ----------------------------------------------------------------------

    def replica(
        self, replica: Mapping[str, Any], at: JsonPath, role: str
    ) -> tuple[dict[str, Any], list[dict[str, Any]], Any]:
        native: JsonPath = ("spec", "replicas", role)
        out: dict[str, Any] = {}
        self.out.origins[native] = at
        self.put(
            out,
            (*native, "count"),
            replica.get("replicas", 1),
            (*at, "replicas") if "replicas" in replica else at,
            implied="replicas" not in replica,
        )
        policy = replica.get("restartPolicy", "Never")  # Kubeflow's default
        self.put(
            out,
            (*native, "restartPolicy"),
            policy,
            (*at, "restartPolicy") if "restartPolicy" in replica else at,
            implied="restartPolicy" not in replica,
        )
        self.unknown(replica, ("replicas", "restartPolicy", "template"), at, "replica")
        template = replica.get("template")
        if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
            self.error(
                (*at, "template"), "a replica needs template.spec.containers with a 'tensorflow' container"
            )
            return out, [], None
        tat = (*at, "template")
        metadata = template.get("metadata")
        if isinstance(metadata, Mapping):
            for key in metadata:
                if key != "creationTimestamp":
                    message = f"the pod template's {key} have no tfdeclare equivalent: ignored"
                    self.warn((*tat, "metadata", key), message)
            self.out.dropped.append((*tat, "metadata"))
        self.unknown(template, ("metadata", "spec"), tat, "template")
        pod = template["spec"]
        pat = (*tat, "spec")
        containers = pod.get("containers")
        if not isinstance(containers, list):
            self.error((*pat, "containers"), "the pod template needs containers, one named 'tensorflow'")
            return out, [], None
        index = next(
            (i for i, c in enumerate(containers) if isinstance(c, Mapping) and c.get("name") == "tensorflow"),
            None,
        )
        if index is None:
            self.error(
                (*pat, "containers"),
                "no container is named 'tensorflow': Kubeflow runs (and watches) the one of that name",
            )
            return out, [], None
        for i, other in enumerate(containers):
            if i != index:
                name = other.get("name") if isinstance(other, Mapping) else i
                self.warn(
                    (*pat, "containers", i), f"sidecar container '{name}' is not run: only 'tensorflow' is"
                )
        for key in ("initContainers", "ephemeralContainers"):
            if key in pod:
                self.warn((*pat, key), f"{key} are not run: only the 'tensorflow' container is")
        if "restartPolicy" in pod:
            self.warn(
                (*pat, "restartPolicy"),
                "the pod's restartPolicy is ignored (as by Kubeflow): the replica's restartPolicy decides",
            )
        mounts = self.container(out, containers[index], (*pat, "containers", index), native)
        volumes = self.volumes(self.listed(pod, "volumes", pat), mounts, (*pat, "volumes"))
        known: tuple[str, ...] = (
            "containers",
            "initContainers",
            "ephemeralContainers",
            "restartPolicy",
            "volumes",
            "nodeSelector",
        )
        if not self.earlier:
            known = (*known, *_POD_SETTINGS)
            for key in _POD_SETTINGS:
                if key in pod:
                    self.pod_settings[key][role] = (pod[key], (*pat, key))
        self.unknown(pod, known, pat, "pod")
        return out, volumes, pod.get("nodeSelector")

    def container(
        self, out: dict[str, Any], container: Mapping[str, Any], cat: JsonPath, native: JsonPath
    ) -> list[tuple[JsonPath, Mapping[str, Any]]]:
        defined: dict[str, str | None] = {}
        if "env" in container:
            defined = self.env(out, container["env"], (*cat, "env"), native)
        self.container_env = defined
        for key in ("image", "imagePullPolicy", "command", "args", "workingDir"):
            if key in container:
                value = container[key]
                if key in ("command", "args") and not self.earlier and isinstance(value, list):
                    value = [
                        self.expanded(v, defined, (*cat, key, i)) if isinstance(v, str) else v
                        for i, v in enumerate(value)
                    ]
                self.put(out, (*native, key), value, (*cat, key))
        self.pull_policy(out, container, cat, native)
        if isinstance(container.get("image"), str) and "workingDir" not in container:
            self.warn(
                cat,
                f"image {container['image']} runs in its task folder (TFDECLARE_WORK_DIR: "
                "writable, kept across restarts), not in the image's WORKDIR: set workingDir to "
                "the WORKDIR to run there (what the task writes there is not kept), or use "
                "absolute paths",
                dropped=False,
            )
        if "envFrom" in container:
            self.warn(
                (*cat, "envFrom"),
                "envFrom (whole ConfigMaps or Secrets) has no equivalent: list each variable",
            )
        if "resources" in container:
            self.resources(out, container["resources"], (*cat, "resources"), native)
        self.best_effort(out, container, cat, native)
        for i, port in enumerate(self.listed(container, "ports", cat)):
            if isinstance(port, Mapping) and (
                port.get("name") == "tfjob-port" or port.get("containerPort") == _TF_PORT
            ):
                continue  # the TF port: tfdeclare assigns each task's and puts it in TF_CONFIG
            number = port.get("containerPort") if isinstance(port, Mapping) else port
            self.warn(
                (*cat, "ports", i),
                f"port {number} is not published: only the TF port is (tfdeclare assigns it)",
            )
        if "ports" in container:  # none is carried over (the TF port is implied)
            self.out.dropped.append((*cat, "ports"))
        if isinstance(container.get("livenessProbe"), Mapping):
            self.liveness(out, container["livenessProbe"], (*cat, "livenessProbe"), native)
        known = ("name", "image", "command", "args", "workingDir", "env", "envFrom", "resources", "ports")
        self.unknown(
            container, (*known, "imagePullPolicy", "volumeMounts", "livenessProbe"), cat, "container"
        )
        mounts = self.listed(container, "volumeMounts", cat)
        return [((*cat, "volumeMounts", i), m) for i, m in enumerate(mounts) if isinstance(m, Mapping)]

    def liveness(self, out: dict[str, Any], probe: Mapping[str, Any], at: JsonPath, native: JsonPath) -> None:
        """A ``livenessProbe`` -> the role's ``healthCheck``: ``exec`` as it is, ``tcpSocket``
        of the TF port as ``tcpSocket: {}`` (the task's own port), the timing fields as they
        are; an HTTP or gRPC probe, or a TCP probe of another port, is warned about."""
        check: dict[str, Any] = {}
        tcp, run = probe.get("tcpSocket"), probe.get("exec")
        if isinstance(tcp, Mapping) and tcp.get("port") in (_TF_PORT, "tfjob-port"):
            check["tcpSocket"] = {}
        elif isinstance(run, Mapping) and "command" in run:
            check["exec"] = {"command": run["command"]}
        else:
            kind = next((k for k in ("httpGet", "grpc", "tcpSocket") if k in probe), "probe")
            self.warn(
                at,
                f"livenessProbe {kind} has no tfdeclare equivalent (healthCheck checks the TF port "
                "with tcpSocket, a command with exec, or progress): no health check",
            )
            return
        for key in ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold"):
            if key in probe:
                check[key] = probe[key]
        self.unknown(
            probe,
            (
                "tcpSocket",
                "exec",
                "initialDelaySeconds",
                "periodSeconds",
                "timeoutSeconds",
                "failureThreshold",
                "successThreshold",
            ),
            at,
            "livenessProbe",
        )
        self.put(out, (*native, "healthCheck"), check, at)

    def pull_policy(
        self, out: dict[str, Any], container: Mapping[str, Any], cat: JsonPath, native: JsonPath
    ) -> None:
        """Kubernetes' default pull policy, written out where it is not ours (IfNotPresent)."""
        image = container.get("image")
        if "imagePullPolicy" in container or not isinstance(image, str) or not pulls_always(image):
            return
        where = (*cat, "image")
        self.put(out, (*native, "imagePullPolicy"), "Always", where, implied=True)
        self.note(
            where,
            f"image {image} is pulled at every launch (imagePullPolicy Always), as Kubernetes "
            "does for an image tagged :latest or untagged; set imagePullPolicy: IfNotPresent "
            "to use the copy an engine has",
        )

    def best_effort(
        self, out: dict[str, Any], container: Mapping[str, Any], cat: JsonPath, native: JsonPath
    ) -> None:
        """A cpu or memory neither requested nor limited: what is reserved, said at the line."""
        resources = container.get("resources")
        asked: set[str] = set()
        if isinstance(resources, Mapping):
            for key in ("requests", "limits"):
                if isinstance(resources.get(key), Mapping):
                    asked.update(str(name) for name in resources[key])
        missing = [
            (name, shown)
            for name, shown in (
                ("cpu", f"{DEFAULT_CPUS} CPU"),
                ("memory", f"{DEFAULT_MEM} of memory"),
            )
            if name not in asked
        ]
        if not missing:
            return
        where = (*cat, "resources") if isinstance(resources, Mapping) else cat
        names = " or ".join(name for name, _ in missing)
        kubernetes = "nothing (BestEffort)" if len(missing) == 2 else f"no {names}"
        defaults = "defaults" if len(missing) == 2 else "default"
        self.warn(
            where,
            f"no {names} request: Kubernetes reserves {kubernetes} for it, but each task must "
            f"reserve something to be placed, so it reserves {' and '.join(s for _, s in missing)} "
            f"(tfdeclare's {defaults}); set resources.requests.{'/'.join(n for n, _ in missing)} "
            "to what the task needs",
            dropped=False,
        )

    def expanded(self, text: str, defined: Mapping[str, str | None], where: JsonPath) -> str:
        """``text`` with its ``$(NAME)`` references expanded as Kubernetes expands them: a name
        of ``defined`` with a value becomes it, ``$$`` is one ``$`` (so ``$$(X)`` is the
        literal ``$(X)``), anything else stays as written; a reference that stays is warned
        about at ``where`` (a secret's value is read only when the task starts)."""
        expanded, left = expand(text, defined)
        for name in left:
            self.unresolved(name, name in defined, where)
        if expanded == text:
            return text  # the very value: convert keeps its quoting style
        self.reread(where, "$(NAME) references are expanded as Kubernetes expands them")
        return expanded

    def unresolved(self, name: str, from_elsewhere: bool, where: JsonPath) -> None:
        why = (
            f"{name} is set by valueFrom, whose value is not known when the manifest is read "
            "(a secret's is read only when the task starts)"
            if from_elsewhere
            else f"no env entry before it names {name} with a value (Kubernetes leaves it so too)"
        )
        self.warn(
            where,
            f"$({name}) is left as written: {why}; read it from the environment in the program, "
            f"or run through a shell (sh -c '... ${name}')",
            dropped=False,
        )

    def env(self, out: dict[str, Any], env: Any, at: JsonPath, native: JsonPath) -> dict[str, str | None]:
        """The container's env into ``out``; returns each name -> its value as ``$(NAME)``
        references read it (None: set from elsewhere, not known here)."""
        defined: dict[str, str | None] = {}
        if not isinstance(env, list):
            self.error(at, "env must be a list of {name, value} entries")
            return defined
        values: dict[str, Any] = {}
        for i, entry in enumerate(env):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                self.error((*at, i), "an env entry needs a name")
                continue
            name, where = entry["name"], (*at, i)
            if entry.get("value") not in (None, "") and "valueFrom" in entry:  # as Kubernetes' own check
                self.error(
                    where,
                    f"env {name} has both value and valueFrom (Kubernetes refuses that): keep one",
                )
                continue
            source = entry.get("valueFrom")
            if "valueFrom" not in entry:
                value = entry.get("value", "")
                if not self.earlier and isinstance(value, str):  # earlier entries only, as Kubernetes
                    value = self.expanded(value, defined, (*where, "value"))
                values[name] = value
                defined[name] = value if isinstance(value, str) else None
                self.out.origins[(*native, "env", name)] = where
                continue
            defined[name] = None
            secret = source.get("secretKeyRef") if isinstance(source, Mapping) else None
            if secret is None:
                self.warn(
                    (*where, "valueFrom"),
                    f"env {name}: only secretKeyRef has an equivalent (a secret reference); "
                    "this variable is not set",
                )
                self.out.dropped.append(where)
                continue
            ref_at = (*where, "valueFrom", "secretKeyRef")
            if not isinstance(secret, Mapping) or not all(
                isinstance(secret.get(key), str) and secret[key] for key in ("name", "key")
            ):
                self.error(ref_at, f"env {name}: secretKeyRef needs a name and a key (strings)")
                continue
            if secret.get("optional") is True:
                self.warn(
                    (*ref_at, "optional"),
                    f"env {name}: optional is not kept; a missing secret fails the task as it starts",
                )
            values[name] = {"secretRef": {"name": secret["name"], "key": secret["key"]}}
            here = (*native, "env", name)
            self.out.origins[here] = where
            self.out.origins[(*here, "secretRef")] = ref_at
            for key in ("name", "key"):
                self.out.origins[(*here, "secretRef", key)] = (*ref_at, key)
        if values:
            out["env"] = values
            self.out.origins[(*native, "env")] = at
        return defined

    def resources(self, out: dict[str, Any], resources: Any, at: JsonPath, native: JsonPath) -> None:
        if not isinstance(resources, Mapping):
            self.error(at, "resources must be a mapping of requests and limits")
            return
        requests, limits = (self.mapped(resources, key, at) for key in ("requests", "limits"))
        wanted: dict[str, Any] = {}
        for name in dict.fromkeys([*requests, *limits]):
            use = "requests" if name in requests else "limits"
            value, where = (requests if use == "requests" else limits)[name], (*at, use, name)
            if name == "cpu":
                cpus = parse_cpu(value)
                if cpus is None:
                    self.error(
                        where,
                        f"cpu {value!r} is not a Kubernetes quantity more than 0, such as 2, 0.5 or 2500m",
                    )
                else:
                    wanted["cpus"] = cpus
                    self.out.origins[(*native, "resources", "cpus")] = where
            elif name == "memory":
                mib = parse_memory_mib(value)
                if mib is None:
                    self.error(
                        where, f"memory {value!r} is not a Kubernetes quantity such as 4Gi, 512Mi or 1G"
                    )
                elif mib > MAX_MEM_MIB:  # said as written, not as the MiB it became
                    self.error(where, f"memory {value!r} is larger than 1 EiB")
                else:
                    wanted["mem"] = f"{mib // 1024}Gi" if mib % 1024 == 0 else mib
                    self.out.origins[(*native, "resources", "mem")] = where
            elif name == "nvidia.com/gpu":
                gpus = parse_gpus(value)
                if gpus is None:
                    self.error(
                        where, f"nvidia.com/gpu {value!r} is not a whole number of GPUs such as 1 or 2"
                    )
                else:
                    wanted["gpus"] = gpus
                    self.out.origins[(*native, "resources", "gpus")] = where
            else:
                self.warn(
                    where, f"resource {name} has no equivalent (cpu, memory and nvidia.com/gpu do): ignored"
                )
            if (
                name in requests
                and name in limits
                and requests[name] != limits[name]
                and name != "nvidia.com/gpu"
            ):
                self.warn(
                    (*at, "limits", name),
                    f"{name} limit {limits[name]} differs from the request: tfdeclare reserves the request",
                )
        self.unknown(resources, ("requests", "limits"), at, "resources")
        if wanted:
            out["resources"] = wanted
            self.out.origins[(*native, "resources")] = at

    def volumes(
        self, volumes: list[Any], mounts: list[tuple[JsonPath, Mapping[str, Any]]], at: JsonPath
    ) -> list[dict[str, Any]]:
        """The container's mounts of ``hostPath`` volumes -> volume entries: each mount its
        own (one volume may be mounted at several paths), at its ``subPath`` of the folder;
        what cannot be mounted is said at its line."""
        named = [(i, v) for i, v in enumerate(volumes) if isinstance(v, Mapping)]
        by_name = {v["name"]: (i, v) for i, v in named if isinstance(v.get("name"), str)}
        mounted: set[str] = set()
        out: list[dict[str, Any]] = []
        for where, mount in mounts:
            name = mount.get("name")
            found = by_name.get(name) if isinstance(name, str) else None
            if found is not None and self.earlier and name in mounted:
                found = None  # earlier versions mounted each volume once
            if found is None:
                self.warn(where, f"volumeMount '{mount.get('name')}' names no volume of the pod: ignored")
                continue
            mounted.add(str(name))
            i, volume = found
            host = volume.get("hostPath")
            if isinstance(host, Mapping) and isinstance(host.get("path"), str):
                folder = self.sub_path(host["path"], mount, where)
                if folder is None:
                    continue
                mode = "ro" if mount.get("readOnly") else "rw"
                entry = {"hostPath": folder, "containerPath": mount.get("mountPath"), "mode": mode}
                out.append(entry)
                self.volume_origins[id(entry)] = {
                    "": (*at, i),
                    "hostPath": (*where, "subPath")
                    if folder != host["path"]
                    else (*at, i, "hostPath", "path"),
                    "containerPath": (*where, "mountPath"),
                    **({"mode": (*where, "readOnly")} if "readOnly" in mount else {}),
                }
                if "type" in host and (*at, i) not in self.typed:
                    self.typed.add((*at, i))
                    self.warn(
                        (*at, i, "hostPath", "type"),
                        f"hostPath type {host['type']} is not checked: the folder must be on the agents "
                        "as it is (nothing is created)",
                    )
                continue
            kind = next((k for k in volume if k != "name"), "unknown")
            self.warn((*at, i, kind), _unmounted(volume, kind, mount))
        for volume_name, (i, volume) in by_name.items():
            if volume_name not in mounted:
                self.warn(
                    (*at, i),
                    f"volume '{volume.get('name')}' is not mounted by the tensorflow container: ignored",
                )
        return out

    def sub_path(self, folder: str, mount: Mapping[str, Any], where: JsonPath) -> str | None:
        """The host folder a mount shows: the volume's, or its ``subPath`` (``subPathExpr``
        with its ``$(NAME)`` references expanded) below it, normalised; None, with an error,
        for one that is absolute, leaves the volume or cannot be resolved (mounting the whole
        volume instead would show the task what the manifest keeps from it). The mount's
        other fields are warned about."""
        for key in mount:
            if key not in ("name", "mountPath", "readOnly", "subPath", "subPathExpr"):
                self.warn((*where, key), f"volumeMount field '{key}' has no tfdeclare equivalent: ignored")
        key = "subPathExpr" if "subPathExpr" in mount else "subPath"
        sub = mount.get(key)
        if sub in (None, ""):  # Kubernetes: an empty subPath is the whole volume
            return folder
        at = (*where, key)
        if not isinstance(sub, str):
            self.error(at, f"{key} must be a relative path inside the volume")
            return None
        if key == "subPathExpr":
            sub = self.expanded(sub, self.container_env, at)
            if "$(" in sub:
                self.error(at, f"subPathExpr {mount[key]!r} cannot be resolved here: set subPath instead")
                return None
        clean = posixpath.normpath(sub)
        if sub.startswith("/") or clean == ".." or clean.startswith("../"):
            self.error(at, f"{key} {sub!r} must be a relative path inside the volume (no leading / or ..)")
            return None
        if clean == ".":
            return folder
        shown = posixpath.join(folder.rstrip("/") or "/", clean)
        self.note(
            at,
            f"mounted as hostPath {shown}: only that folder of the volume is in the task (versions "
            "before this one mounted the whole volume: a job one of them applied restarts to narrow it)",
        )
        return shown


def _unmounted(volume: Mapping[str, Any], kind: str, mount: Mapping[str, Any]) -> str:
    """The warning for a volume that is not a hostPath, naming its natural equivalent."""
    name, path = volume.get("name"), mount.get("mountPath")
    if kind == "emptyDir":
        return (
            f"volume '{name}' (emptyDir) is not mounted at {path}: each task has a writable working "
            "folder of its own (TFDECLARE_WORK_DIR, where it runs unless workingDir is absolute), "
            "kept across its restarts: write to a relative path there (such as "
            f"'{str(path or name).strip('/').rpartition('/')[2] or name}/') instead"
        )
    if kind == "secret":
        secret = volume.get("secret")
        secret_name = secret.get("secretName") if isinstance(secret, Mapping) else None
        items = secret.get("items") if isinstance(secret, Mapping) else None
        keys = (
            [i["key"] for i in items if isinstance(i, Mapping) and isinstance(i.get("key"), str)]
            if isinstance(items, list)
            else []
        )
        key = keys[0] if keys else "KEY"
        return (
            f"volume '{name}' (secret {secret_name}) is not mounted at {path}: tfdeclare does not "
            "mount secrets; it passes each as an environment value read when the task starts: "
            f"give each key as one, e.g. env: {{NAME: {{secretRef: {{name: {secret_name}, key: {key}}}}}}} "
            "(a file of the secrets folder, docs/security.md)"
        )
    return (
        f"volume '{name}' ({kind}) has no equivalent: put the data on the agents and mount it with a "
        "hostPath volume (spec.volumes)"
    )


def _role_of(kind: str, api_version: str) -> str | None:
    """Our role of a replica type (``Worker``, ``Master``, ...), or None."""
    if kind.lower() == _V1ALPHA2_EVAL and api_version == "kubeflow.org/v1alpha2":
        return "evaluator"
    return _ROLES.get(kind.lower())


def pulls_always(image: str) -> bool:
    """Whether Kubernetes pulls ``image`` at every start by default: tagged ``:latest``, or
    neither tagged nor pinned by a digest (a registry's port is not a tag)."""
    if "@" in image:
        return False
    _name, colon, tag = image.rpartition("/")[2].partition(":")
    return not colon or tag == "latest"


def _unread_version(version: str) -> str:
    """What to change when a Kubeflow TFJob's version is not one we read."""
    others = ", ".join(v.removeprefix(API_GROUP) for v in SAME_FIELDS_AS_V1)
    if version == "kubeflow.org/v1alpha1":
        return (
            "kubeflow.org/v1alpha1 TFJobs are not read: their spec.replicaSpecs list (tfReplicaType, "
            "tfPort) became the spec.tfReplicaSpecs mapping in v1alpha2; rewrite it as "
            f"{API_VERSION} (tfReplicaSpecs: {{PS: {{replicas, template}}, Worker: ...}})"
        )
    return (
        f"apiVersion {version} is not a TFJob version tfdeclare reads ({API_VERSION}, and {others}, "
        f"whose fields are v1's): if its fields are v1's, change apiVersion to {API_VERSION}"
    )


def translate(document: Mapping[str, Any], *, earlier: bool = False) -> Translation:
    """The native form of a Kubeflow TFJob manifest (``is_kubeflow``) and what did not map;
    ``earlier``: as the versions before these readings read it (the pods' grace and priority
    class, ``$(VAR)`` references, several mounts of one volume, one path mounted by several
    roles): their job records hold that reading; ``Translation.reread`` says where today's
    differs."""
    return _Translator(earlier).document(document)
