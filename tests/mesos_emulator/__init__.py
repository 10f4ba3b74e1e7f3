"""A protocol-faithful Mesos master emulator for tfdeclare's tests.

It serves the Mesos v1 scheduler HTTP API (``POST /api/v1/scheduler``) the way the real
master does — validation order and status codes, stream ids, RecordIO, offers and
filters, reliable status updates, reconciliation, failover — and runs command tasks as
real local processes (or simulated ones for scale tests). See README.md.

Typical use::

    with Emulator(agents=2, heartbeat_interval=0.2, allocation_interval=0.05) as emu:
        client = MyScheduler(emu.url)
        ...
        emu.partition_agent(emu.agent_ids()[0])
"""

from .config import EmulatorConfig
from .emulator import Emulator

__all__ = ["Emulator", "EmulatorConfig"]
