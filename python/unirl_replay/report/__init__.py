"""Stage 3, report: the matched comparison of a replay with the measured outcomes.

Owns: matching and the honesty labels (``compare``), error statistics (``metrics``), where the
error comes from (``steps``: engine steps rebuilt from the outcomes; ``timing_eval``: the replay's
timing model evaluated outside the simulator; ``profile_check``; ``decompose``: the exact additive
decomposition; ``explain`` wires them in; ``bracket``: bounds of unmodelled constraints;
``conditions``: capture vs calibration conditions), PNG plots (``plots``), the Perfetto / Chrome
trace (``perfetto``), the text table (``text``) and the report directory writer (``outputs``).

May import: ``unirl_replay.contract`` (including the outcomes reader: this is where measured
outcomes are meant to be read), ``unirl_replay.v1``, itself, numpy and matplotlib.
Never imports: replay (it works from the ``ReplayResult`` message, not from the runner), capture,
reference, calibrate, conformance, cli, demo, or a simulator.
"""
