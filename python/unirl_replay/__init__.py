"""unirl-replay: replay real UniRL rollouts in Dynamo Replay and measure the prediction error.

The data model is the generated protobuf code of ``proto/unirl_replay/v1`` (importable as
``unirl_replay.v1.*_pb2``, generated into ``gen/python``). This package holds only what is this
project's own: trace I/O, validation, capture, conversion, replay, comparison, conformance, CLI.
"""

import pkgutil

# The generated messages live in gen/python/unirl_replay/v1 (a separate source root in a
# development checkout, merged into this package in a wheel). Let both roots serve the package.
__path__ = pkgutil.extend_path(__path__, __name__)

__version__ = "0.1.0"
SCHEMA_VERSION = "unirl_replay.v1"
