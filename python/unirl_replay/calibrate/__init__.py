"""Calibration: a measured ``dynamo_profile`` timing profile from the real engine.

Owns: the sweep plan, the provenance and the ``calibrate`` command's flow (``profiler``), the fit
(``fit``), the profile NPZ and its checks (``profile_file``), the driver process (``driver``), the
shared error and forms (``common``), the run conditions of a sweep (``conditions``), the reference
probe points and the probe-levelled profile (``probe``); the sweep itself runs in the reference
environment (``reference.calibration_driver``), started as a process.

May import: ``unirl_replay.contract``, ``unirl_replay.v1``, ``unirl_replay.reference.environments``
(to find the reference interpreter), itself, numpy, and exactly two stdlib-only modules of capture:
``capture.procfs`` (the ``/proc`` counters of ``RunConditions``) and ``capture.probe`` (the reference
probe's point definitions). Why: a sweep's conditions and a capture window's must be measured by the
same code, and the probe's points are defined where the probe runs (inside the capture's engines);
capture ships into users' processes and may import nothing of calibrate, so the shared code lives
on capture's side.
Never imports: a reference driver in process, replay, report, any other part of capture (the
hooks, finalize), conformance, cli, demo, or a simulator.
"""
