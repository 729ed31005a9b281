"""Conformance corpus runner.

The corpus lives in ``conformance/`` at the repository root (see its README.md): each case is a
trace directory plus its expected results. The runner talks to an *executor* (an adapter under
test) over the language-neutral protocol of :mod:`unirl_replay.conformance.protocol`, so an adapter
written in another language is checked against the same corpus.

May import: ``unirl_replay.contract``, ``unirl_replay.replay`` (the Python executor drives the
real replay path), ``unirl_replay.reference.environments`` (cached simulator environments live
under the repository root), itself.
Never imports: report, capture, calibrate, cli, demo, a reference driver, or a simulator package
directly: a simulator revision runs in its own environment, reached through the executor protocol.
"""
