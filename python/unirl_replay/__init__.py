"""unirl-replay: replay real UniRL rollouts in Dynamo Replay and measure the prediction error.

The data model is the generated protobuf code of ``proto/unirl_replay/v1`` (importable as
``unirl_replay.v1.*_pb2``, generated into ``gen/python``). This package holds only what is this
project's own, one package per pipeline stage, in data-flow order:

    contract/   the v1 trace: I/O, outcomes I/O, JSON profile, schemas, validation, typed errors
    capture/    default-off hooks inside a user's UniRL / vLLM processes -> raw records -> trace
    reference/  the project's own CPU reference execution (real UniRL + vLLM-CPU drivers)
    replay/     pure converters, support checks, runner, derivation, timing models, simulators/
    report/     matched comparison, metrics, plots, Perfetto, text
    calibrate/  measured timing profiles;  conformance/  golden cases across simulator revisions
    cli/        one module per verb;  demo/  the bundled end-to-end job

Each package's docstring says what it owns, what it may import and what it must never import;
``tests/test_import_rules.py`` enforces those rules on the import graph.
"""

import pkgutil

# The generated messages live in gen/python/unirl_replay/v1 (a separate source root in a
# development checkout, merged into this package in a wheel). Let both roots serve the package.
__path__ = pkgutil.extend_path(__path__, __name__)

__version__ = "0.1.0"
SCHEMA_VERSION = "unirl_replay.v1"
