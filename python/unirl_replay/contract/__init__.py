"""Stage 0, the contract: everything that reads, writes or checks a v1 trace.

Owns: trace directories (``trace_io``: manifest, JSONL / binpb framing, the streaming writer; ``columnar``: the
``arrow`` encoding, pyarrow imported only there and only when used),
the measured-outcomes artifact (``outcomes_io``, its only reader), the one JSON mapping
(``json_profile``), JSON Schema generation (``jsonschema_gen``), forward compatibility inside v1 (``compat``: contract revisions, unknown
fields), ``recode`` (a trace rewritten in another encoding), the semantic rules
(``validate``: a rule registry and one module per rule group), the one checked reader of a
``dynamo_profile`` timing profile NPZ (``profile_npz``: replay, report and calibrate read profiles through it)
and the typed errors (``errors``).

May import: ``unirl_replay`` (version, schema version), the generated messages
(``unirl_replay.v1``) and itself.
Never imports: any other stage (capture, reference, replay, report, calibrate, conformance, cli,
demo) or a simulator. Every other stage builds on this one.
"""
