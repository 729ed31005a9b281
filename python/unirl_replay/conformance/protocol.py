"""The executor protocol: JSON lines over stdin/stdout (protocol id ``unirl_replay.conformance.v1``).

An executor is any program that reads one JSON request per line on stdin and answers each with
exactly one JSON line on stdout, in order. It first writes a hello line::

    {"protocol": "unirl_replay.conformance.v1", "executor": "<name>",
     "simulator": {"name": "ai-dynamo", "version": "1.6.1"}}

Requests::

    {"id": "<case>", "op": "convert", "trace_dir": "/abs/trace", "format": "agentic_mooncake"}
    {"id": "<case>", "op": "replay", "trace_dir": "/abs/trace", "format": "agentic_mooncake",
     "timing_model": "fixed:10,1"}

Either request may carry ``"allow_unmodelled": ["<rule>", ...]``: constraints the case explicitly
lets the adapter drop (and label), e.g. ``engine_client.inflight_limit``.

Answers (one per request, same ``id``)::

    {"id": ..., "status": "ok", "converted": [<upstream input rows as JSON objects>]}      # convert
    {"id": ..., "status": "ok", "replay_result": <ReplayResult in the JSON profile>}     # replay
    {"id": ..., "status": "rejected", "error": {"type": "UnsupportedWorkloadError", "rule": "..."}}
    {"id": ..., "status": "error", "message": "..."}                                     # anything else

The executor stops at end of input. stderr is free for logs.

Hostile input: a line longer than :data:`MAX_LINE_CHARS`, a line that is not one JSON object, or
JSON with duplicate keys, NaN / Infinity, huge numbers or deep nesting
(:mod:`unirl_replay.contract.json_guard`) is answered with ``"status": "error"`` by the executor,
and an executor answer like that makes the runner fail the run with a typed error; neither side
ever ends in a traceback.
"""

from __future__ import annotations

PROTOCOL_ID = "unirl_replay.conformance.v1"
#: Longest protocol line (request or answer) read, in characters.
MAX_LINE_CHARS = 256 << 20
OPS = ("convert", "replay")
STATUSES = ("ok", "rejected", "error")
