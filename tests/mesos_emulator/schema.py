"""The subset of the Mesos v1 protobuf schema that the emulator reads and writes.

Owns: field names, declaration order, labels (required / repeated / map), explicit
defaults and the ``deprecated`` option of every message the scheduler API touches, plus
the enum value names. ``jsonenc`` uses it to parse calls the way stout's
``protobuf::parse`` does and to write events the way stout's ``JSON::protobuf`` does.

The schema is written in a compact DSL, one string per message::

    "name:type"   optional field        "name:type!"  required field
    "name:type*"  repeated field        "name:type{}" map<string, type>
    "name:type=D" explicit default D    "name:type~"  [deprecated = true]

Field order is *declaration* order, which is the order stout writes fields in. A message
listed in ``OPAQUE`` is accepted as any JSON object and echoed back unchanged (the emulator
does not interpret it); this is a documented simplification.
"""

from __future__ import annotations

from dataclasses import dataclass

SCALARS = frozenset({"string", "bytes", "bool", "double", "float", "int32", "int64", "uint32", "uint64"})

_ENUM_TEXT: dict[str, str] = {
    "Event.Type": (
        "UNKNOWN SUBSCRIBED OFFERS INVERSE_OFFERS RESCIND RESCIND_INVERSE_OFFER UPDATE "
        "UPDATE_OPERATION_STATUS MESSAGE FAILURE ERROR HEARTBEAT"
    ),
    "Call.Type": (
        "UNKNOWN SUBSCRIBE TEARDOWN ACCEPT DECLINE ACCEPT_INVERSE_OFFERS DECLINE_INVERSE_OFFERS "
        "REVIVE KILL SHUTDOWN ACKNOWLEDGE ACKNOWLEDGE_OPERATION_STATUS RECONCILE "
        "RECONCILE_OPERATIONS MESSAGE REQUEST SUPPRESS UPDATE_FRAMEWORK"
    ),
    "FrameworkInfo.Capability.Type": (
        "UNKNOWN REVOCABLE_RESOURCES TASK_KILLING_STATE GPU_RESOURCES SHARED_RESOURCES "
        "PARTITION_AWARE MULTI_ROLE RESERVATION_REFINEMENT REGION_AWARE"
    ),
    "MasterInfo.Capability.Type": "UNKNOWN AGENT_UPDATE AGENT_DRAINING QUOTA_V2",
    "Value.Type": "SCALAR RANGES SET TEXT",
    "Resource.ReservationInfo.Type": "UNKNOWN STATIC DYNAMIC",
    "Resource.DiskInfo.Source.Type": "UNKNOWN PATH MOUNT BLOCK RAW",
    "Offer.Operation.Type": (
        "UNKNOWN LAUNCH LAUNCH_GROUP RESERVE UNRESERVE CREATE DESTROY GROW_VOLUME "
        "SHRINK_VOLUME CREATE_DISK DESTROY_DISK"
    ),
    "ExecutorInfo.Type": "UNKNOWN DEFAULT CUSTOM",
    "CheckInfo.Type": "UNKNOWN COMMAND HTTP TCP",
    "HealthCheck.Type": "UNKNOWN COMMAND HTTP TCP",
    "TaskState": (
        "TASK_STAGING TASK_STARTING TASK_RUNNING TASK_KILLING TASK_FINISHED TASK_FAILED "
        "TASK_KILLED TASK_ERROR TASK_LOST TASK_DROPPED TASK_UNREACHABLE TASK_GONE "
        "TASK_GONE_BY_OPERATOR TASK_UNKNOWN"
    ),
    "OperationState": (
        "OPERATION_UNSUPPORTED OPERATION_PENDING OPERATION_FINISHED OPERATION_FAILED "
        "OPERATION_ERROR OPERATION_DROPPED OPERATION_UNREACHABLE OPERATION_GONE_BY_OPERATOR "
        "OPERATION_RECOVERING OPERATION_UNKNOWN"
    ),
    "TaskStatus.Source": "SOURCE_MASTER SOURCE_AGENT SOURCE_EXECUTOR",
    "TaskStatus.Reason": (
        "REASON_COMMAND_EXECUTOR_FAILED REASON_CONTAINER_LAUNCH_FAILED "
        "REASON_CONTAINER_LIMITATION REASON_CONTAINER_LIMITATION_DISK "
        "REASON_CONTAINER_LIMITATION_MEMORY REASON_CONTAINER_PREEMPTED "
        "REASON_CONTAINER_UPDATE_FAILED REASON_MAX_COMPLETION_TIME_REACHED "
        "REASON_EXECUTOR_REGISTRATION_TIMEOUT REASON_EXECUTOR_REREGISTRATION_TIMEOUT "
        "REASON_EXECUTOR_TERMINATED REASON_EXECUTOR_UNREGISTERED REASON_FRAMEWORK_REMOVED "
        "REASON_GC_ERROR REASON_INVALID_FRAMEWORKID REASON_INVALID_OFFERS "
        "REASON_IO_SWITCHBOARD_EXITED REASON_MASTER_DISCONNECTED REASON_RECONCILIATION "
        "REASON_RESOURCES_UNKNOWN REASON_AGENT_DISCONNECTED REASON_AGENT_DRAINING "
        "REASON_AGENT_REMOVED REASON_AGENT_REMOVED_BY_OPERATOR REASON_AGENT_REREGISTERED "
        "REASON_AGENT_RESTARTED REASON_AGENT_UNKNOWN REASON_TASK_KILLED_DURING_LAUNCH "
        "REASON_TASK_CHECK_STATUS_UPDATED REASON_TASK_HEALTH_CHECK_STATUS_UPDATED "
        "REASON_TASK_GROUP_INVALID REASON_TASK_GROUP_UNAUTHORIZED REASON_TASK_INVALID "
        "REASON_TASK_UNAUTHORIZED REASON_TASK_UNKNOWN"
    ),
    "Environment.Variable.Type": "UNKNOWN VALUE SECRET",
    "Secret.Type": "UNKNOWN REFERENCE VALUE",
    "Image.Type": "APPC DOCKER",
    "MountPropagation.Mode": "UNKNOWN HOST_TO_CONTAINER BIDIRECTIONAL",
    "Volume.Mode": "RW RO",
    "Volume.Source.Type": ("UNKNOWN DOCKER_VOLUME HOST_PATH SANDBOX_PATH SECRET CSI_VOLUME"),
    "Volume.Source.SandboxPath.Type": "UNKNOWN SELF PARENT",
    "NetworkInfo.Protocol": "IPv4 IPv6",
    "LinuxInfo.IpcMode": "UNKNOWN PRIVATE SHARE_PARENT",
    "ContainerInfo.Type": "DOCKER MESOS",
    "ContainerInfo.DockerInfo.Network": "HOST BRIDGE NONE USER",
    "DiscoveryInfo.Visibility": "FRAMEWORK CLUSTER EXTERNAL",
}

ENUMS: dict[str, tuple[str, ...]] = {name: tuple(text.split()) for name, text in _ENUM_TEXT.items()}

# Messages the emulator accepts as free-form JSON objects (see module docstring).
OPAQUE = frozenset(
    {
        "OfferConstraints",
        "Volume.Source.CSIVolume",
        "CapabilityInfo",
        "SeccompInfo",
        "RLimitInfo",
        "TTYInfo",
        "CgroupInfo",
        "Unavailability",
    }
)

_MESSAGES: dict[str, str] = {
    # --- ids and small values -------------------------------------------------------
    "FrameworkID": "value:string!",
    "OfferID": "value:string!",
    "AgentID": "value:string!",
    "TaskID": "value:string!",
    "ExecutorID": "value:string!",
    "ContainerID": "value:string! parent:ContainerID",
    "ResourceProviderID": "value:string!",
    "OperationID": "value:string!",
    "UUID": "value:bytes!",
    "TimeInfo": "nanoseconds:int64!",
    "DurationInfo": "nanoseconds:int64!",
    "Address": "hostname:string ip:string port:int32!",
    "URL": "scheme:string! address:Address! path:string query:Parameter* fragment:string",
    "Label": "key:string! value:string",
    "Labels": "labels:Label*",
    "Parameter": "key:string! value:string!",
    "Parameters": "parameter:Parameter*",
    "Credential": "principal:string! secret:string",
    "Secret": "type:Secret.Type reference:Secret.Reference value:Secret.Value",
    "Secret.Reference": "name:string! key:string",
    "Secret.Value": "data:bytes!",
    "Filters": "refuse_seconds:double=5.0",
    "Environment": "variables:Environment.Variable*",
    "Environment.Variable": ("name:string! type:Environment.Variable.Type=VALUE value:string secret:Secret"),
    # --- framework / master ------------------------------------------------------------
    "FrameworkInfo": (
        "user:string! name:string! id:FrameworkID failover_timeout:double=0.0 "
        "checkpoint:bool=false role:string=*~ roles:string* hostname:string "
        "principal:string webui_url:string capabilities:FrameworkInfo.Capability* "
        "labels:Labels offer_filters:OfferFilters{}"
    ),
    "FrameworkInfo.Capability": "type:FrameworkInfo.Capability.Type",
    "OfferFilters": "min_allocatable_resources:OfferFilters.MinAllocatableResources",
    "OfferFilters.ResourceQuantities": "quantities:Value.Scalar{}",
    "OfferFilters.MinAllocatableResources": "quantities:OfferFilters.ResourceQuantities*",
    "DomainInfo": "fault_domain:DomainInfo.FaultDomain",
    "DomainInfo.FaultDomain": (
        "region:DomainInfo.FaultDomain.RegionInfo! zone:DomainInfo.FaultDomain.ZoneInfo!"
    ),
    "DomainInfo.FaultDomain.RegionInfo": "name:string!",
    "DomainInfo.FaultDomain.ZoneInfo": "name:string!",
    "MasterInfo": (
        "id:string! ip:uint32! port:uint32!=5050 pid:string hostname:string version:string "
        "address:Address domain:DomainInfo capabilities:MasterInfo.Capability*"
    ),
    "MasterInfo.Capability": "type:MasterInfo.Capability.Type",
    # --- values and resources ------------------------------------------------------------
    "Value": ("type:Value.Type! scalar:Value.Scalar ranges:Value.Ranges set:Value.Set text:Value.Text"),
    "Value.Scalar": "value:double!",
    "Value.Range": "begin:uint64! end:uint64!",
    "Value.Ranges": "range:Value.Range*",
    "Value.Set": "item:string*",
    "Value.Text": "value:string!",
    "Attribute": (
        "name:string! type:Value.Type! scalar:Value.Scalar ranges:Value.Ranges set:Value.Set text:Value.Text"
    ),
    "Resource": (
        "provider_id:ResourceProviderID name:string! type:Value.Type! scalar:Value.Scalar "
        "ranges:Value.Ranges set:Value.Set role:string=*~ "
        "allocation_info:Resource.AllocationInfo reservation:Resource.ReservationInfo "
        "reservations:Resource.ReservationInfo* disk:Resource.DiskInfo "
        "revocable:Resource.RevocableInfo shared:Resource.SharedInfo"
    ),
    "Resource.AllocationInfo": "role:string",
    "Resource.ReservationInfo": (
        "type:Resource.ReservationInfo.Type role:string principal:string labels:Labels"
    ),
    "Resource.DiskInfo": (
        "persistence:Resource.DiskInfo.Persistence volume:Volume source:Resource.DiskInfo.Source"
    ),
    "Resource.DiskInfo.Persistence": "id:string! principal:string",
    "Resource.DiskInfo.Source": (
        "type:Resource.DiskInfo.Source.Type! path:Resource.DiskInfo.Source.Path "
        "mount:Resource.DiskInfo.Source.Mount vendor:string id:string metadata:Labels "
        "profile:string"
    ),
    "Resource.DiskInfo.Source.Path": "root:string",
    "Resource.DiskInfo.Source.Mount": "root:string",
    "Resource.RevocableInfo": "",
    "Resource.SharedInfo": "",
    "Request": "agent_id:AgentID resources:Resource*",
    # --- offers and operations -----------------------------------------------------------
    "Offer": (
        "id:OfferID! framework_id:FrameworkID! agent_id:AgentID! hostname:string! url:URL "
        "domain:DomainInfo resources:Resource* attributes:Attribute* executor_ids:ExecutorID* "
        "unavailability:Unavailability allocation_info:Resource.AllocationInfo"
    ),
    "Offer.Operation": (
        "type:Offer.Operation.Type id:OperationID launch:Offer.Operation.Launch "
        "launch_group:Offer.Operation.LaunchGroup reserve:Offer.Operation.Reserve "
        "unreserve:Offer.Operation.Unreserve create:Offer.Operation.Create "
        "destroy:Offer.Operation.Destroy grow_volume:Offer.Operation.GrowVolume "
        "shrink_volume:Offer.Operation.ShrinkVolume create_disk:Offer.Operation.CreateDisk "
        "destroy_disk:Offer.Operation.DestroyDisk"
    ),
    "Offer.Operation.Launch": "task_infos:TaskInfo*",
    "Offer.Operation.LaunchGroup": "executor:ExecutorInfo! task_group:TaskGroupInfo!",
    "Offer.Operation.Reserve": "source:Resource* resources:Resource*",
    "Offer.Operation.Unreserve": "resources:Resource*",
    "Offer.Operation.Create": "volumes:Resource*",
    "Offer.Operation.Destroy": "volumes:Resource*",
    "Offer.Operation.GrowVolume": "volume:Resource! addition:Resource!",
    "Offer.Operation.ShrinkVolume": "volume:Resource! subtract:Value.Scalar!",
    "Offer.Operation.CreateDisk": (
        "source:Resource! target_type:Resource.DiskInfo.Source.Type! target_profile:string"
    ),
    "Offer.Operation.DestroyDisk": "source:Resource!",
    "InverseOffer": (
        "id:OfferID! url:URL framework_id:FrameworkID! agent_id:AgentID "
        "unavailability:Unavailability! resources:Resource*"
    ),
    # --- tasks ------------------------------------------------------------------------------
    "TaskInfo": (
        "name:string! task_id:TaskID! agent_id:AgentID! resources:Resource* "
        "executor:ExecutorInfo command:CommandInfo container:ContainerInfo "
        "health_check:HealthCheck check:CheckInfo kill_policy:KillPolicy data:bytes "
        "labels:Labels discovery:DiscoveryInfo max_completion_time:DurationInfo "
        "limits:Value.Scalar{}"
    ),
    "TaskGroupInfo": "tasks:TaskInfo*",
    "ExecutorInfo": (
        "type:ExecutorInfo.Type executor_id:ExecutorID! framework_id:FrameworkID "
        "command:CommandInfo container:ContainerInfo resources:Resource* name:string "
        "source:string~ data:bytes discovery:DiscoveryInfo shutdown_grace_period:DurationInfo "
        "labels:Labels"
    ),
    "CommandInfo": (
        "uris:CommandInfo.URI* environment:Environment shell:bool=true value:string "
        "arguments:string* user:string"
    ),
    "CommandInfo.URI": ("value:string! executable:bool extract:bool=true cache:bool output_file:string"),
    "KillPolicy": "grace_period:DurationInfo",
    "CheckInfo": (
        "type:CheckInfo.Type command:CheckInfo.Command http:CheckInfo.Http tcp:CheckInfo.Tcp "
        "delay_seconds:double=15.0 interval_seconds:double=10.0 timeout_seconds:double=20.0"
    ),
    "CheckInfo.Command": "command:CommandInfo!",
    "CheckInfo.Http": "port:uint32! path:string",
    "CheckInfo.Tcp": "port:uint32!",
    "HealthCheck": (
        "delay_seconds:double=15.0 interval_seconds:double=10.0 timeout_seconds:double=20.0 "
        "consecutive_failures:uint32=3 grace_period_seconds:double=10.0 type:HealthCheck.Type "
        "command:CommandInfo http:HealthCheck.HTTPCheckInfo tcp:HealthCheck.TCPCheckInfo"
    ),
    "HealthCheck.HTTPCheckInfo": (
        "protocol:NetworkInfo.Protocol=IPv4 scheme:string port:uint32! path:string statuses:uint32*"
    ),
    "HealthCheck.TCPCheckInfo": "protocol:NetworkInfo.Protocol=IPv4 port:uint32!",
    "DiscoveryInfo": (
        "visibility:DiscoveryInfo.Visibility! name:string environment:string location:string "
        "version:string ports:Ports labels:Labels"
    ),
    "Port": ("number:uint32! name:string protocol:string visibility:DiscoveryInfo.Visibility labels:Labels"),
    "Ports": "ports:Port*",
    # --- containers --------------------------------------------------------------------------
    "ContainerInfo": (
        "type:ContainerInfo.Type! volumes:Volume* hostname:string "
        "docker:ContainerInfo.DockerInfo mesos:ContainerInfo.MesosInfo "
        "network_infos:NetworkInfo* linux_info:LinuxInfo rlimit_info:RLimitInfo "
        "tty_info:TTYInfo"
    ),
    "ContainerInfo.DockerInfo": (
        "image:string! network:ContainerInfo.DockerInfo.Network=HOST "
        "port_mappings:ContainerInfo.DockerInfo.PortMapping* privileged:bool=false "
        "parameters:Parameter* force_pull_image:bool volume_driver:string~"
    ),
    "ContainerInfo.DockerInfo.PortMapping": ("host_port:uint32! container_port:uint32! protocol:string"),
    "ContainerInfo.MesosInfo": "image:Image",
    "Image": "type:Image.Type! appc:Image.Appc docker:Image.Docker cached:bool=true",
    "Image.Appc": "name:string! id:string labels:Labels",
    "Image.Docker": "name:string! credential:Credential~ config:Secret",
    "MountPropagation": "mode:MountPropagation.Mode",
    "Volume": ("mode:Volume.Mode! container_path:string! host_path:string image:Image source:Volume.Source"),
    "Volume.Source": (
        "type:Volume.Source.Type docker_volume:Volume.Source.DockerVolume "
        "host_path:Volume.Source.HostPath sandbox_path:Volume.Source.SandboxPath "
        "secret:Secret csi_volume:Volume.Source.CSIVolume"
    ),
    "Volume.Source.DockerVolume": "driver:string name:string! driver_options:Parameters",
    "Volume.Source.HostPath": "path:string! mount_propagation:MountPropagation",
    "Volume.Source.SandboxPath": "type:Volume.Source.SandboxPath.Type path:string!",
    "NetworkInfo": (
        "ip_addresses:NetworkInfo.IPAddress* name:string groups:string* labels:Labels "
        "port_mappings:NetworkInfo.PortMapping*"
    ),
    "NetworkInfo.IPAddress": "protocol:NetworkInfo.Protocol=IPv4 ip_address:string",
    "NetworkInfo.PortMapping": "host_port:uint32! container_port:uint32! protocol:string",
    "LinuxInfo": (
        "capability_info:CapabilityInfo~ bounding_capabilities:CapabilityInfo "
        "effective_capabilities:CapabilityInfo share_pid_namespace:bool seccomp:SeccompInfo "
        "ipc_mode:LinuxInfo.IpcMode shm_size:uint32 share_cgroups:bool=true"
    ),
    "ContainerStatus": (
        "container_id:ContainerID network_infos:NetworkInfo* cgroup_info:CgroupInfo executor_pid:uint32"
    ),
    # --- status ---------------------------------------------------------------------------
    "CheckStatusInfo": (
        "type:CheckInfo.Type command:CheckStatusInfo.Command http:CheckStatusInfo.Http "
        "tcp:CheckStatusInfo.Tcp"
    ),
    "CheckStatusInfo.Command": "exit_code:int32",
    "CheckStatusInfo.Http": "status_code:uint32",
    "CheckStatusInfo.Tcp": "succeeded:bool",
    "TaskResourceLimitation": "resources:Resource*",
    "TaskStatus": (
        "task_id:TaskID! state:TaskState! message:string source:TaskStatus.Source "
        "reason:TaskStatus.Reason data:bytes agent_id:AgentID executor_id:ExecutorID "
        "timestamp:double uuid:bytes healthy:bool check_status:CheckStatusInfo labels:Labels "
        "container_status:ContainerStatus unreachable_time:TimeInfo "
        "limitation:TaskResourceLimitation"
    ),
    "OperationStatus": (
        "operation_id:OperationID state:OperationState! message:string "
        "converted_resources:Resource* uuid:UUID agent_id:AgentID "
        "resource_provider_id:ResourceProviderID"
    ),
    # --- scheduler.proto: events -------------------------------------------------------------
    "Event": (
        "type:Event.Type subscribed:Event.Subscribed offers:Event.Offers "
        "inverse_offers:Event.InverseOffers rescind:Event.Rescind "
        "rescind_inverse_offer:Event.RescindInverseOffer update:Event.Update "
        "update_operation_status:Event.UpdateOperationStatus message:Event.Message "
        "failure:Event.Failure error:Event.Error"
    ),
    "Event.Subscribed": (
        "framework_id:FrameworkID! heartbeat_interval_seconds:double master_info:MasterInfo"
    ),
    "Event.Offers": "offers:Offer*",
    "Event.InverseOffers": "inverse_offers:InverseOffer*",
    "Event.Rescind": "offer_id:OfferID!",
    "Event.RescindInverseOffer": "inverse_offer_id:OfferID!",
    "Event.Update": "status:TaskStatus!",
    "Event.UpdateOperationStatus": "status:OperationStatus!",
    "Event.Message": "agent_id:AgentID! executor_id:ExecutorID! data:bytes!",
    "Event.Failure": "agent_id:AgentID executor_id:ExecutorID status:int32",
    "Event.Error": "message:string!",
    # --- scheduler.proto: calls ----------------------------------------------------------------
    "Call": (
        "framework_id:FrameworkID type:Call.Type subscribe:Call.Subscribe accept:Call.Accept "
        "decline:Call.Decline accept_inverse_offers:Call.AcceptInverseOffers "
        "decline_inverse_offers:Call.DeclineInverseOffers revive:Call.Revive kill:Call.Kill "
        "shutdown:Call.Shutdown acknowledge:Call.Acknowledge "
        "acknowledge_operation_status:Call.AcknowledgeOperationStatus "
        "reconcile:Call.Reconcile reconcile_operations:Call.ReconcileOperations "
        "message:Call.Message request:Call.Request suppress:Call.Suppress "
        "update_framework:Call.UpdateFramework"
    ),
    "Call.Subscribe": (
        "framework_info:FrameworkInfo! suppressed_roles:string* offer_constraints:OfferConstraints"
    ),
    "Call.Accept": "offer_ids:OfferID* operations:Offer.Operation* filters:Filters",
    "Call.Decline": "offer_ids:OfferID* filters:Filters",
    "Call.AcceptInverseOffers": "inverse_offer_ids:OfferID* filters:Filters",
    "Call.DeclineInverseOffers": "inverse_offer_ids:OfferID* filters:Filters",
    "Call.Revive": "roles:string*",
    "Call.Suppress": "roles:string*",
    "Call.Kill": "task_id:TaskID! agent_id:AgentID kill_policy:KillPolicy",
    "Call.Shutdown": "executor_id:ExecutorID! agent_id:AgentID!",
    "Call.Acknowledge": "agent_id:AgentID! task_id:TaskID! uuid:bytes!",
    "Call.AcknowledgeOperationStatus": (
        "agent_id:AgentID resource_provider_id:ResourceProviderID uuid:bytes! operation_id:OperationID!"
    ),
    "Call.Reconcile": "tasks:Call.Reconcile.Task*",
    "Call.Reconcile.Task": "task_id:TaskID! agent_id:AgentID",
    "Call.ReconcileOperations": "operations:Call.ReconcileOperations.Operation*",
    "Call.ReconcileOperations.Operation": (
        "operation_id:OperationID! agent_id:AgentID resource_provider_id:ResourceProviderID"
    ),
    "Call.Message": "agent_id:AgentID! executor_id:ExecutorID! data:bytes!",
    "Call.Request": "requests:Request*",
    "Call.UpdateFramework": (
        "framework_info:FrameworkInfo! suppressed_roles:string* offer_constraints:OfferConstraints"
    ),
}


CATEGORY_MESSAGE, CATEGORY_ENUM, CATEGORY_STRING, CATEGORY_BYTES = 0, 1, 2, 3
CATEGORY_BOOL, CATEGORY_FLOAT, CATEGORY_INT = 4, 5, 6
_SCALAR_CATEGORY = {
    "string": CATEGORY_STRING,
    "bytes": CATEGORY_BYTES,
    "bool": CATEGORY_BOOL,
    "double": CATEGORY_FLOAT,
    "float": CATEGORY_FLOAT,
    "int32": CATEGORY_INT,
    "int64": CATEGORY_INT,
    "uint32": CATEGORY_INT,
    "uint64": CATEGORY_INT,
}


@dataclass(frozen=True, slots=True)
class Field:
    """One protobuf field: ``label`` is ``optional``, ``required``, ``repeated`` or ``map``."""

    name: str
    kind: str
    label: str
    default: object = None
    deprecated: bool = False
    is_message: bool = False  # computed by ``_parse_field``
    category: int = 0  # one of the CATEGORY_* constants, computed by ``_parse_field``


def _parse_default(kind: str, text: str) -> object:
    if kind in ("double", "float"):
        return float(text)
    if kind in ("int32", "int64", "uint32", "uint64"):
        return int(text)
    if kind == "bool":
        return text == "true"
    return text  # strings and enum names


def _parse_field(spec: str) -> Field:
    name, _, rest = spec.partition(":")
    deprecated = rest.endswith("~")
    rest = rest.rstrip("~")
    default: object = None
    if "=" in rest:
        rest, _, default_text = rest.partition("=")
        default = default_text
    label = "optional"
    if rest.endswith("!"):
        label, rest = "required", rest[:-1]
    elif rest.endswith("*"):
        label, rest = "repeated", rest[:-1]
    elif rest.endswith("{}"):
        label, rest = "map", rest[:-2]
    if isinstance(default, str):
        default = _parse_default(rest, default)
    is_message = rest not in SCALARS and rest not in _ENUM_TEXT
    if is_message:
        category = CATEGORY_MESSAGE
    elif rest in _ENUM_TEXT:
        category = CATEGORY_ENUM
    else:
        category = _SCALAR_CATEGORY[rest]
    return Field(name, rest, label, default, deprecated, is_message, category)


def _build() -> dict[str, tuple[Field, ...]]:
    built: dict[str, tuple[Field, ...]] = {}
    for message, text in _MESSAGES.items():
        built[message] = tuple(_parse_field(spec) for spec in text.split())
    for message, fields in built.items():
        for field in fields:
            known = field.kind in SCALARS or field.kind in ENUMS
            if not known and field.kind not in built and field.kind not in OPAQUE:
                raise AssertionError(f"{message}.{field.name}: unknown type {field.kind}")
    return built


MESSAGES: dict[str, tuple[Field, ...]] = _build()
FIELDS_BY_NAME: dict[str, dict[str, Field]] = {
    message: {field.name: field for field in fields} for message, fields in MESSAGES.items()
}
ENUM_SETS: dict[str, frozenset[str]] = {name: frozenset(values) for name, values in ENUMS.items()}
REQUIRED: dict[str, tuple[str, ...]] = {
    message: tuple(f.name for f in fields if f.label == "required") for message, fields in MESSAGES.items()
}
