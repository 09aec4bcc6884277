"""The evaluation engine: everything about evaluating one run, with no Celery and no Redis.

The engine (a plain function), the planner conversation, the litellm adapter, budgets,
evidence checks, fencing, confirmation, the read-only toolsets, logs, tracing and the
metric definitions. Beside it ``workers.policy_engine`` (CEL probes, imported policies)
shares its layer; both import only ``schemas`` and ``prompts`` below them, and the fleet
builds on them.
"""
