"""The evaluation core: everything about evaluating one run, with no Celery and no Redis.

The engine (a plain function), the planner conversation, the litellm adapter, budgets,
evidence checks, fencing, confirmation, the read-only toolsets, logs, tracing and the
metric definitions. It imports only ``schemas`` and ``prompts``; the fleet builds on it.
"""
