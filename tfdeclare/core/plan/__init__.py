"""The plan: ``desired`` (all loaded files together: unique names, protected names of invalid
files), ``observed`` (what the planner needs of each job record), ``planner`` (one action per job
with closed-vocabulary reasons and field changes) and ``render`` (text, JSON, Markdown)."""
