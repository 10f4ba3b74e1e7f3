"""The Mesos backend: tfdeclare as a Mesos v1 HTTP framework."""
