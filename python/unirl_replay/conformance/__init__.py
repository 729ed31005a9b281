"""Conformance corpus runner.

The corpus lives in ``conformance/`` at the repository root (see its README.md): each case is a
trace directory plus its expected results. The runner talks to an *executor* (an adapter under
test) over the language-neutral protocol of :mod:`unirl_replay.conformance.protocol`, so an adapter
written in another language is checked against the same corpus.
"""
