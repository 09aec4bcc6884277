"""The preset zlib dictionary of stored run reports, version 1. Never edit it.

Why a dictionary: a 3-step report is about 3 KB of JSON, and most of it is the
schema's own field names (``"prompt_tokens":``, ``"tool_latency_seconds":``,
``"evidence_verified":``...), repeated in every report but not often enough inside
one report for zlib to gain much from them. Starting the compressor with them
already in its window halves the stored report (1,047 to about 600 bytes for the
bench's 3-step report) and shortens the compression itself, since fewer literals
are coded (issue 15).

What it holds: the skeleton of a finished report (request, budget, a THOUGHT, a
COMMAND and a DONE step, the verdict with one piece of evidence) with every value
blanked, written as the store writes a report (pydantic's compact JSON, fields in
the schema's order). Nothing of any cluster or predicate: only the schema's names
and the enum values every report repeats.

Why never edit: a stored report names its dictionary by its mark (``zd1:``) and zlib
checks the dictionary's Adler-32 on reading, so a changed text would make every
report written with it unreadable. A better dictionary is a new constant with a new
mark, this one kept for reading (tests pin its SHA-256).
"""

from __future__ import annotations

REPORT_DICTIONARY_V1 = (
    b'{"run_id":"","check_id":"","status":"done","request":{"kind":"check","text":"",'
    b'"target":{"type":"snapshot","path":""},"toolsets":["kubernetes"],"profile":"fast",'
    b'"budget":{"max_iterations":null,"max_tokens":null,"timeout_seconds":null,'
    b'"max_cost_usd":null},"model":null,"api_base":null,"run_id":"","check_id":"",'
    b'"batch_id":null,"schedule_id":null,"probe":"off","not_before":null,"submitted_at":""},'
    b'"budget":{"max_iterations":0,"max_tokens":0,"timeout_seconds":0,"max_cost_usd":null},'
    b'"model":"","steps":[{"index":0,"kind":"THOUGHT","action":{"action":"THOUGHT",'
    b'"thought":""},"raw":null,"tool":null,"arguments":{},"ok":null,"output":null,'
    b'"error":null,"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,'
    b'"cost_usd":null,"latency_seconds":0,"anomaly":null},"tool_latency_seconds":0,'
    b'"started_at":""},{"index":0,"kind":"COMMAND","action":{"action":"COMMAND",'
    b'"tool":"get","arguments":{"kind":"","namespace":""},"reason":""},"raw":null,'
    b'"tool":"get","arguments":{"kind":"","namespace":""},"ok":true,"output":"",'
    b'"error":null,"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,'
    b'"cost_usd":null,"latency_seconds":0,"anomaly":null},"tool_latency_seconds":0,'
    b'"started_at":""},{"index":0,"kind":"DONE","action":{"action":"DONE","verdict":"true",'
    b'"explanation":"","evidence":[{"step":0,"excerpt":""}],"findings":[],"probe":null},'
    b'"raw":null,"tool":null,"arguments":{},"ok":null,"output":null,"error":null,'
    b'"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,"cost_usd":null,'
    b'"latency_seconds":0,"anomaly":null},"tool_latency_seconds":0,"started_at":""}],'
    b'"verdict":{"verdict":"true","exit_code":0,"explanation":"","evidence":[{"step":0,'
    b'"tool":"get","arguments":{"kind":"","namespace":""},"ok":true,"excerpt":"",'
    b'"verified":true,"structured":false}],"findings":[],"evidence_verified":true,'
    b'"confirmed":null,"reason":null,"budget_exhausted":null,"wake_at":null,'
    b'"source":"model","probe_version":null,"iterations":0,"usage":{"prompt_tokens":0,'
    b'"completion_tokens":0,"total_tokens":0,"cost_usd":null},"duration_seconds":0,'
    b'"model":"","profile":"fast","kind":"check","run_id":"","check_id":"","target":"",'
    b'"started_at":"","finished_at":""},"attempts":0,"probe":null,"wake_at":null,'
    b'"checkpoint":null}'
)
