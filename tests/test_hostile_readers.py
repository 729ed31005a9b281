"""Readers other than the trace's: profile NPZ and replay result turn malformed input into typed errors."""

from __future__ import annotations

import glob

import numpy as np
import pytest

from tracebuild import grpo_trace
from unirl_replay.cli.main import main
from unirl_replay.replay.timing_models import TimingModelError, parse_timing_model

PROFILE = sorted(glob.glob("profiles/*.npz"))


@pytest.mark.skipif(not PROFILE, reason="no bundled profile")
@pytest.mark.parametrize("mutate", ["garbage", "empty", "short_itl", "strings", "nan", "object", "prov_not_object"])
def test_malformed_profiles_are_typed_errors(mutate, tmp_path):
    z = dict(np.load(PROFILE[0], allow_pickle=False))
    f = tmp_path / "p.npz"
    if mutate in ("garbage", "empty"):
        f.write_bytes(b"PK\x03\x04junk" if mutate == "garbage" else b"")
    else:
        if mutate == "short_itl":
            z["decode_itl"] = z["decode_itl"][:3]
        elif mutate == "strings":
            z["prefill_ttft_ms"] = np.array(["x"] * z["prefill_isl"].size)
        elif mutate == "nan":
            z["decode_itl"] = z["decode_itl"].copy()
            z["decode_itl"][0, 0] = np.nan
        elif mutate == "object":
            z["prefill_isl"] = np.array([1, "a"], dtype=object)
        elif mutate == "prov_not_object":
            z["provenance"] = np.array("[1, 2]")
        try:
            np.savez(f, **z)
        except ValueError:
            pytest.skip("numpy refuses to write it")
    with pytest.raises(TimingModelError):
        parse_timing_model(f"profile:{f}")


@pytest.mark.parametrize("text,rule", [
    ('{"schema_version": "unirl_replay.v1", "schema_version": "x"}', "json.duplicate_key"),
    ('{"granularity": 99}', "enum.unknown"),
    ('{"makespan_ns": NaN}', "json.nan"),
    ("[" * 50_000, "json.depth"),
    ('{"requests": [{"request_id": "a\\u0001"}]}', "id.invalid"),
])
def test_malformed_replay_results_are_typed_errors(text, rule, tmp_path, capsys):
    d = grpo_trace().write(tmp_path / "t")
    (tmp_path / "r.json").write_text(text)
    assert main(["compare", str(d), str(tmp_path / "r.json"), "--out", str(tmp_path / "o"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert f"[{rule}]" in err and "Traceback" not in err


@pytest.mark.parametrize("where", ["workload.jsonl", "outcomes.jsonl", "manifest.json", "replay_result"])
def test_a_key_holding_an_unpaired_surrogate_is_a_typed_error(where, tmp_path, capsys):
    """JSON text may spell an unpaired UTF-16 surrogate (\\ud800); as a key, upb's lookup by name raised a
    SystemError (a traceback) where every other bad key is json.profile. The reference parser words it now, so
    every reader (trace records, manifest, replay result) and every fast tier agree."""
    d = grpo_trace().write(tmp_path / "t")
    bad = '"\\ud800":1,'
    if where == "replay_result":
        (tmp_path / "r.json").write_text("{" + bad[:-1] + "}")
        argv = ["compare", str(d), str(tmp_path / "r.json"), "--out", str(tmp_path / "o"), "--no-plots"]
    else:
        f = d / where
        if not f.exists():
            pytest.skip(f"{where} not in this trace's encoding")
        text = f.read_text()
        f.write_text(text.replace("{", "{" + bad, 1))
        if where != "manifest.json":  # the manifest's digests follow the edit: the record itself is read
            from fuzzlib import reseal

            reseal(d)
        argv = ["validate", str(d)]
    rc = main(argv)
    err = capsys.readouterr()
    assert rc != 0 and "Traceback" not in err.err + err.out
    assert "unpaired UTF-16 surrogate" in err.err + err.out and "json.parse" in err.err + err.out
