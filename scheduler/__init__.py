"""The timer service: periodic schedules, deferred evaluations and WAIT continuations."""
