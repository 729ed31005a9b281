"""Calibration: a measured ``dynamo_profile`` timing profile from the real engine.

Owns: the sweep plan, the provenance and the ``calibrate`` command's flow (``profiler``), the fit
(``fit``), the profile NPZ and its checks (``profile_file``), the driver process (``driver``), the
shared error and forms (``common``), the run conditions of a sweep (``conditions``), the reference
probe points and the probe-levelled profile (``probe``); the sweep itself runs in the reference
environment (``reference.calibration_driver``), started as a process.

May import: ``unirl_replay.contract``, ``unirl_replay.v1``, ``unirl_replay.reference.environments``
(to find the reference interpreter), itself, numpy.
Never imports: a reference driver in process, replay, report, capture, conformance, cli, demo, or
a simulator.
"""
