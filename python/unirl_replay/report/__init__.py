"""Stage 3, report: the matched comparison of a replay with the measured outcomes.

Owns: matching and the honesty labels (``compare``), error statistics (``metrics``), PNG plots
(``plots``), the Perfetto / Chrome trace (``perfetto``), the text table (``text``) and the report
directory writer (``outputs``).

May import: ``unirl_replay.contract`` (including the outcomes reader: this is where measured
outcomes are meant to be read), ``unirl_replay.v1``, itself, numpy and matplotlib.
Never imports: replay (it works from the ``ReplayResult`` message, not from the runner), capture,
reference, calibrate, conformance, cli, demo, or a simulator.
"""
