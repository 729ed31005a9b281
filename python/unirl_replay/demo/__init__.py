"""The main job end to end on the bundled real traces (``unirl-replay demo``).

Owns: the orchestration in ``run`` (validate, replay with the calibrated profile and the default,
compare, summarise). An orchestrator: it may import contract, replay, report and
``reference.environments``; it never imports capture, a reference driver, calibrate or cli.
"""
