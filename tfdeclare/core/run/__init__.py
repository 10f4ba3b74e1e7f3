"""One job's run, as pure functions of the record, the observed tasks and the time:
``record`` (the controller's memory of a job, its revision and conditions), ``clusterspec``
(TF_CONFIG / legacy flags per task and the task's config hash), ``launches`` (gang requests and
task launches from a placement), ``lifecycle`` (stop / launch / finish, restarts, backoff,
deadlines), ``status`` (the status document), ``tasks`` (the values that cross the backend
boundary: gang requests, placements, launches, observed tasks)."""
