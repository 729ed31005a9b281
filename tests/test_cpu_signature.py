"""The host's CPU signature (``RunConditions.cpu_signature``): read from ``/proc/cpuinfo``, recorded by the
capture (window and probe conditions) and the calibration sweep (provenance ``conditions``), and compared by
``compare``: a warning when the two differ, and a plain statement when one side recorded none (light env)."""

from __future__ import annotations

import json

from test_capture_conditions import _raw_with_probes
from test_capture_finalize import _load

from unirl_replay.calibrate import conditions as cal_cond
from unirl_replay.capture import procfs
from unirl_replay.capture.finalize import finalize
from unirl_replay.capture.shard_records import record_problem
from unirl_replay.contract.profile_npz import check_provenance
from unirl_replay.report.conditions import condition_warnings
from unirl_replay.v1 import manifest_pb2 as mpb
from unirl_replay.v1 import replay_pb2 as rpb

ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: 1
microcode\t: 0x1000065
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512vl avx512_bf16 avx512_vnni hypervisor

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: 1
microcode\t: 0x1000065
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512vl avx512_bf16 avx512_vnni hypervisor
"""
# the same model name on an older generation (Zen 2: no AVX-512)
ZEN2 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 49
model name\t: AMD EPYC
stepping\t: 0
microcode\t: 0x830107a
flags\t\t: fpu sse2 avx2 hypervisor
"""
SPR = """processor : 0
vendor_id : GenuineIntel
cpu family : 6
model : 143
model name : Intel(R) Xeon(R) Platinum 8480+
stepping : 8
microcode : 0x2b000461
flags : avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_bf16 amx_int8 avx_vnni
"""
ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer\t: 0x41
"""


def test_the_first_processor_block_is_read_with_its_isa_flags():
    s = procfs.parse_cpu_signature(ZEN4)
    assert s["vendor_id"] == "AuthenticAMD" and (s["cpu_family"], s["model"], s["stepping"]) == (25, 17, 1)
    assert s["microcode"] == "0x1000065" and len(s["flags_digest"]) == procfs.FLAGS_DIGEST_HEX
    assert s["isa_flags"] == ["avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"]
    assert s["isa_flags_checked"] == list(procfs.ISA_FLAGS)
    assert "amx_bf16" in procfs.parse_cpu_signature(SPR)["isa_flags"]
    assert procfs.parse_cpu_signature(SPR)["model"] == 143  # "key : value" with spaces reads the same


def test_same_model_name_different_cpus_have_different_signatures_and_flag_order_does_not_matter():
    a, b = procfs.parse_cpu_signature(ZEN4), procfs.parse_cpu_signature(ZEN2)
    assert a["flags_digest"] != b["flags_digest"] and b["isa_flags"] == ["avx2"]
    shuffled = ZEN4.replace("fpu sse2 avx2 avx512f", "avx512f avx2 fpu  sse2", 1)
    assert procfs.parse_cpu_signature(shuffled)["flags_digest"] == a["flags_digest"]


def test_missing_keys_are_left_out_never_guessed(tmp_path):
    arm = procfs.parse_cpu_signature(ARM)
    assert set(arm) == {"flags_digest", "isa_flags", "isa_flags_checked"} and arm["isa_flags"] == []
    assert procfs.parse_cpu_signature("") == {}
    assert procfs.parse_cpu_signature("cpu family\t: x\n") == {}  # not a number: left out
    assert procfs.cpu_signature(tmp_path) == {}  # no cpuinfo there
    (tmp_path / "cpuinfo").write_text(ZEN2)
    assert procfs.cpu_signature(tmp_path)["model"] == 49
    assert "AuthenticAMD family 23 model 49 stepping 0, microcode 0x830107a" in procfs.signature_text(
        procfs.cpu_signature(tmp_path))
    assert procfs.signature_text({}) == "none recorded"


def test_snapshots_and_conditions_carry_the_signature():
    f = procfs.conditions_fields({"cpu_signature": procfs.parse_cpu_signature(ZEN4)}, {})
    assert f["cpu_signature"]["model"] == 17
    f = procfs.conditions_fields({}, {}, hardware={"cpu_signature": procfs.parse_cpu_signature(ZEN2)})
    assert f["cpu_signature"]["model"] == 49
    assert "cpu_signature" not in procfs.conditions_fields({}, {})
    snap = procfs.host_snapshot()
    if procfs.cpu_signature():  # this host's /proc/cpuinfo
        assert snap["cpu_signature"] == procfs.cpu_signature()
    rec = {"kind": "window_start", "at": {"monotonic": 1.0}, "conditions": snap}
    assert record_problem(rec) is None
    bad = {"kind": "window_start", "at": {"monotonic": 1.0}, "conditions": {"cpu_signature": {"model": "17"}}}
    assert "cpu_signature.model" in record_problem(bad)


def test_calibration_conditions_record_it_and_the_provenance_reader_accepts_it(monkeypatch):
    monkeypatch.setattr(procfs, "cpu_signature", lambda root=procfs.PROC: procfs.parse_cpu_signature(SPR))
    c = cal_cond.run_conditions(cal_cond.snapshot(), cal_cond.snapshot(), hardware={"cpu_model": "X", "cpu_count": 2})
    assert c.cpu_signature.vendor_id == "GenuineIntel" and c.cpu_signature.model == 143
    assert list(c.cpu_signature.isa_flags)[-3:] == ["amx_tile", "amx_bf16", "amx_int8"]
    j = cal_cond.conditions_json(c)
    assert j["cpu_signature"]["model"] == 143 and j["cpu_signature"]["microcode"] == "0x2b000461"
    prov = {"measured": True, "conditions": json.loads(json.dumps(j))}
    assert check_provenance(prov, "p.npz", ValueError) is prov


def _with_signature(raw, sig):
    drv = next(raw.glob("driver-*.jsonl"))
    lines = [json.loads(x) for x in drv.read_text().splitlines()]
    for r in lines:
        if isinstance(r.get("conditions"), dict):
            r["conditions"]["cpu_signature"] = sig
    drv.write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_finalize_puts_it_in_the_window_and_probe_conditions(tmp_path):
    raw = tmp_path / "raw"
    _raw_with_probes(raw)
    _with_signature(raw, procfs.parse_cpu_signature(ZEN4))
    finalize(raw, tmp_path / "w0", rollouts="0:0", workload_name="grpo-unit")
    man = _load(tmp_path / "w0")[0]
    s = man.conditions.cpu_signature
    assert (s.vendor_id, s.cpu_family, s.model, s.stepping, s.microcode) == ("AuthenticAMD", 25, 17, 1, "0x1000065")
    assert "avx512_bf16" in s.isa_flags and "amx_bf16" in s.isa_flags_checked and "amx_bf16" not in s.isa_flags
    assert man.probes and all(p.conditions.cpu_signature.model == 17 for p in man.probes)


def test_finalize_without_a_signature_leaves_it_unset(tmp_path):
    raw = tmp_path / "raw"
    _raw_with_probes(raw)  # hand-built marks: no cpu_signature, as a capture of an older hook writes them
    finalize(raw, tmp_path / "w0", rollouts="0:0", workload_name="grpo-unit")
    assert not _load(tmp_path / "w0")[0].conditions.HasField("cpu_signature")


# compare: the warning both ways, and the sides that recorded none


def _replay():
    r = rpb.ReplayResult()
    r.timing_model.kind = rpb.TIMING_MODEL_KIND_PROFILE
    return r


def _manifest(text: str | None):
    m = mpb.TraceManifest()
    m.hardware.cpu_model, m.hardware.cpu_count = "AMD EPYC", 2
    m.conditions.loadavg_1m_start = 1.0
    if text is not None:
        sig = cal_cond.mpb.RunConditions()
        for k, v in procfs.parse_cpu_signature(text).items():
            if isinstance(v, list):
                getattr(sig.cpu_signature, k).extend(v)
            else:
                setattr(sig.cpu_signature, k, v)
        m.conditions.cpu_signature.CopyFrom(sig.cpu_signature)
    return m


def _prov(text: str | None, **kw):
    cond = {"loadavg_1m_start": 1.0, "loadavg_1m_end": 1.0}
    if text is not None:
        cond["cpu_signature"] = procfs.parse_cpu_signature(text)
    return {"measured": True, "hardware": {"cpu_model": "AMD EPYC", "cpu_count": 2}, "conditions": cond, **kw}


def _sig_warnings(m, prov):
    return [w for w in condition_warnings(m, _replay(), prov, None) if "signature" in w]


def test_equal_signatures_say_nothing():
    assert _sig_warnings(_manifest(ZEN4), _prov(ZEN4)) == []


def test_a_different_signature_warns_both_ways_naming_what_differs():
    w = _sig_warnings(_manifest(ZEN4), _prov(ZEN2))
    assert len(w) == 1 and w[0].startswith("CPU signature differs (cpu_family, model, stepping, microcode, "
                                           "flags_digest, isa_flags)")
    assert "capture AuthenticAMD family 25 model 17" in w[0] and "calibration AuthenticAMD family 23 model 49" in w[0]
    assert "recalibrate on the capture's host" in w[0]
    back = _sig_warnings(_manifest(ZEN2), _prov(ZEN4))
    assert len(back) == 1 and "capture AuthenticAMD family 23 model 49" in back[0]
    micro = ZEN4.replace("0x1000065", "0x1000066")
    assert _sig_warnings(_manifest(ZEN4), _prov(micro))[0].startswith("CPU signature differs (microcode)")
    # the CPU model string alone is equal ("AMD EPYC" both): only the signature tells them apart
    assert not any("CPU model differs" in w for w in condition_warnings(_manifest(ZEN4), _replay(), _prov(ZEN2), None))


def test_a_calibration_without_signature_is_said_plainly():
    w = _sig_warnings(_manifest(ZEN4), _prov(None))
    assert len(w) == 1 and w[0].startswith("the calibration recorded no CPU signature (only CPU model 'AMD EPYC')")
    assert "cannot be told whether the profile was measured on the capture's hardware" in w[0]
    levelled = _sig_warnings(_manifest(ZEN4), _prov(None, probe_levelled={"trace_id": "t"}))
    assert "the probe levelling rescales the level, not the profile's form" in levelled[0]
    cap_none = _sig_warnings(_manifest(None), _prov(ZEN4))
    assert len(cap_none) == 1 and cap_none[0].startswith("the capture recorded no CPU signature")


def test_neither_side_recorded_one_adds_nothing_and_camel_case_provenance_reads():
    assert _sig_warnings(_manifest(None), _prov(None)) == []
    camel = _prov(None)
    camel["conditions"]["cpuSignature"] = {"vendorId": "AuthenticAMD", "cpuFamily": 25, "model": 17, "stepping": 1,
                                           "microcode": "0x1000065",
                                           "flagsDigest": procfs.parse_cpu_signature(ZEN4)["flags_digest"],
                                           "isaFlags": procfs.parse_cpu_signature(ZEN4)["isa_flags"]}
    assert _sig_warnings(_manifest(ZEN4), camel) == []


def test_a_hand_edited_signature_in_the_provenance_is_refused_naming_the_key():
    import pytest

    with pytest.raises(ValueError, match=r"provenance\.conditions\.cpu_signature\.model"):
        check_provenance({"measured": True, "conditions": {"cpu_signature": {"model": "17"}}}, "p.npz", ValueError)


def test_isa_flags_compare_as_a_set_and_print_in_the_recorded_order():
    prov = _prov(ZEN4)
    prov["conditions"]["cpu_signature"]["isa_flags"] = list(reversed(prov["conditions"]["cpu_signature"]["isa_flags"]))
    assert _sig_warnings(_manifest(ZEN4), prov) == []
    w = _sig_warnings(_manifest(ZEN4), _prov(None))[0]
    assert "ISA avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16)" in w


def test_a_profile_of_other_hardware_is_labelled_unvalidated_never_calibrated():
    """The CPU model string is "AMD EPYC" on both sides; only the signature tells the hosts apart. A profile
    of another processor (family / model / stepping / ISA) is an UNVALIDATED prediction of this run: the
    title says so (and the condition warning says why); a microcode update alone stays a warning."""
    from unirl_replay.report.conditions import hardware_mismatch
    from unirl_replay.report.labels import honesty_label

    r = _replay()
    r.timing_model.calibration = rpb.CALIBRATION_STATUS_CALIBRATED
    r.timing_model.profile_path = "/p/cpu.npz"
    why = hardware_mismatch(_manifest(ZEN4), r, _prov(ZEN2))
    assert why and "family 25 model 17" in why and "family 23 model 49" in why
    assert honesty_label(_manifest(ZEN4), r, other_hardware=True).endswith(
        "profile cpu.npz (UNVALIDATED on this host: CALIBRATED on other hardware)")
    assert hardware_mismatch(_manifest(ZEN4), r, _prov(ZEN4)) is None
    assert hardware_mismatch(_manifest(ZEN4), r, _prov(ZEN4.replace("0x1000065", "0x1000066"))) is None
    assert hardware_mismatch(_manifest(ZEN4), r, _prov(None)) is None  # unknown: warned about, not labelled
    other_model = _prov(ZEN4)
    other_model["hardware"]["cpu_model"] = "Intel Xeon"
    assert "CPU model" in hardware_mismatch(_manifest(ZEN4), r, other_model)
    r.timing_model.calibration = rpb.CALIBRATION_STATUS_CALIBRATED_PROBE
    assert "(UNVALIDATED on this host: CALIBRATED+PROBE on other hardware)" in honesty_label(
        _manifest(ZEN4), r, other_hardware=True)
    r.timing_model.kind = rpb.TIMING_MODEL_KIND_POLYNOMIAL
    r.timing_model.calibration = rpb.CALIBRATION_STATUS_UNCALIBRATED
    assert hardware_mismatch(_manifest(ZEN4), r, _prov(ZEN2)) is None  # no calibration host to differ from
