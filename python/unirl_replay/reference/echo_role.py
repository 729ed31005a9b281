"""A trivial UniRL role for capture tests without an engine (reference environment).

``EchoRollout.generate`` is a ``@distributed(DP_SCATTER)`` method like ``VLLMRolloutEngine.generate``:
UniRL's ``Handle`` scatters the Sample over the role's workers and gathers their shares; each share
comes back unchanged after ``delay_s``. It exercises the driver-side ``Handle.generate`` hook and
``DevicePool.setup()`` on CPU (the CPU bridges) in seconds instead of an engine start.
"""

from __future__ import annotations

import time

from unirl.distributed.group.dispatch import Dispatch, distributed
from unirl.distributed.group.remote import Remote


class EchoRollout(Remote):
    def __init__(self, delay_s: float = 0.05) -> None:
        super().__init__()
        self.delay_s = float(delay_s)

    @distributed(dispatch_mode=Dispatch.DP_SCATTER)
    def generate(self, sample):
        time.sleep(self.delay_s)
        return sample


__all__ = ["EchoRollout"]
