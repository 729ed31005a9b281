"""Semantic validation of a trace directory beyond the schema: ``check_trace(dir) -> TraceCheck``.

Every violation names the file, the 1-based line (JSONL) or frame (binpb) -- 0 when it is about
the whole file --, the record id, the rule id (:data:`RULES`) and a message. Warnings
(``Violation.SEVERITY_WARNING``) never make a trace invalid.

Streaming and memory: the workload is read two times (three when a dependency does not point to
an earlier turn of its own trajectory, to look for cycles), the outcomes once. What stays in memory
is one small int per request id (trajectory ordinal, turn index, fan-out), its group id and (n > 1
only) its sample ids, the id of the group listing it, and per-id entries for trajectories, groups
and batches: a 1M-request trace checks in a few hundred MB at most. Every record that does not
parse is reported and skipped (the passes go on), up to the per-rule cap.

Layout: ``registry`` (every rule: id, group, severity, summary), ``context`` (the state of one run
and shared helpers), one module per rule group (``manifest``, ``requests``, ``dependencies``,
``lineage``, ``outcomes``, ``bounds``; framing and hostile-input errors come from
``contract.trace_io`` / ``contract.json_guard`` / ``contract.message_guard``), ``checker`` (the
passes and :func:`check_trace`), ``fast`` (the gate's fast pass: the workload rules proven silent over
the columns, or no answer). ``contract.gate`` runs these rules in front of every command.
"""

from unirl_replay.contract.validate.checker import check_trace, format_violation
from unirl_replay.contract.validate.registry import ERROR, RULE_GROUP, RULE_SEVERITY, RULES, WARNING

__all__ = ["ERROR", "RULES", "RULE_GROUP", "RULE_SEVERITY", "WARNING", "check_trace", "format_violation"]
