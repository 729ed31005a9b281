"""The Python adapter as a conformance executor (see :mod:`unirl_replay.conformance.protocol`).

Run as ``python -m unirl_replay.conformance.executor``: reads JSON-line requests on stdin, answers
each on stdout. Works in any environment that has this package on the path and some ai-dynamo
revision installed (the runner makes one per revision). With ``UNIRL_REPLAY_SIMULATOR`` set (e.g.
``aisimulate==0.13.0.dev202610270000000085``) it replays on that simulator line instead (the
aisimulate adapter runs the build in its own cached environment).
"""

from __future__ import annotations

import json
import sys
import tempfile
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from unirl_replay.conformance.protocol import MAX_LINE_CHARS, PROTOCOL_ID
from unirl_replay.contract.errors import TraceRejectedError, UnsupportedWorkloadError


SIMULATOR_ENV = "UNIRL_REPLAY_SIMULATOR"


def _line() -> str:
    return os.environ.get(SIMULATOR_ENV) or "dynamo"


def _simulator() -> dict[str, str]:
    from unirl_replay.replay.simulators import parse_simulator

    module, version = parse_simulator(_line())
    if module == "aisimulate":
        return {"name": "aisimulate", "version": version or ""}
    try:
        return {"name": "ai-dynamo", "version": metadata.version("ai-dynamo")}
    except metadata.PackageNotFoundError:
        return {"name": "ai-dynamo", "version": ""}


def convert_rows(trace_dir: str, fmt: str, unmodelled: list[str] | tuple[str, ...] = ()) -> dict[str, list[Any]]:
    """Upstream input rows per engine id (header line first for agentic_mooncake)."""
    from unirl_replay.contract.gate import gate
    from unirl_replay.replay.runner import convert_trace

    engines = [e.engine_id for e in gate(trace_dir, "conformance").manifest.engines]
    out: dict[str, list[Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for eid in engines:
            (path,) = convert_trace(trace_dir, Path(tmp) / "input.jsonl", trace_format=fmt, engine_id=eid,
                                  unmodelled=unmodelled)
            out[eid] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def _request(line: str, n: int) -> dict[str, Any]:
    """One protocol request line, or a marker answered as an error (never a traceback)."""
    from unirl_replay.contract import json_guard
    from unirl_replay.contract.errors import TraceFormatError

    if len(line) > MAX_LINE_CHARS:
        return {"_bad": f"request line {n} longer than {MAX_LINE_CHARS} characters"}
    try:
        req = json_guard.loads(line, file="<stdin>", line=n)
    except TraceFormatError as e:
        return {"_bad": str(e)}
    return req if isinstance(req, dict) else {"_bad": f"request line {n} is not a JSON object"}


def handle(req: dict[str, Any]) -> dict[str, Any]:
    """Answer one protocol request; never raises."""
    if not isinstance(req, dict) or "_bad" in req:
        return {"id": None, "status": "error", "message": str(req.get("_bad") if isinstance(req, dict) else req)}
    rid = req.get("id")
    try:
        op = req["op"]
        if op == "convert":
            return {"id": rid, "status": "ok", "converted": convert_rows(req["trace_dir"], req["format"],
                                                                    req.get("allow_unmodelled", ()))}
        if op == "replay":
            from unirl_replay.contract import json_profile
            from unirl_replay.contract.gate import gate
            from unirl_replay.replay.runner import replay_trace

            gate(req["trace_dir"], "conformance")
            result = replay_trace(req["trace_dir"], req["timing_model"], trace_format=req["format"],
                                  unmodelled=req.get("allow_unmodelled", ()), simulator=_line())
            return {"id": rid, "status": "ok", "replay_result": json_profile.to_dict(result)}
        return {"id": rid, "status": "error", "message": f"unknown op {op!r}"}
    except UnsupportedWorkloadError as e:
        return {"id": rid, "status": "rejected", "error": {"type": type(e).__name__, "rule": e.rule, "message": str(e)}}
    except TraceRejectedError as e:  # the gate: validate's rules, before the adapter
        return {"id": rid, "status": "rejected", "error": {"type": "TraceRejectedError", "rule": e.first_rule,
                                                          "message": str(e)}}
    except Exception as e:  # noqa: BLE001 - the protocol reports every failure as an answer
        return {"id": rid, "status": "error", "message": f"{type(e).__name__}: {e}"}


def main() -> int:
    print(json.dumps({"protocol": PROTOCOL_ID, "executor": "unirl-replay-python", "simulator": _simulator()}), flush=True)
    for n, line in enumerate(sys.stdin, 1):
        if line.strip():
            print(json.dumps(handle(_request(line, n))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
