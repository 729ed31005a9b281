"""Retro-analysis only: add RolloutBatch.after_batch to a copy of a holdout trace, the gap computed as the new
capture computes it (rollout-k's first submit minus rollout-(k-1)'s ready), digests rewritten."""
import hashlib, json, shutil, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
shutil.copytree(src, dst, dirs_exist_ok=True)
outs = [json.loads(l) for l in (dst / "outcomes.jsonl").read_text().splitlines() if l.strip()]
ready = {o["rollout_batch"]["rollout_batch_id"]: int(o["rollout_batch"]["ready_ns"]) for o in outs if "rollout_batch" in o}
submit = {o["request"]["request_id"]: int(o["request"]["submit_ns"]) for o in outs if "request" in o}
lines = (dst / "workload.jsonl").read_text().splitlines()
recs = [json.loads(l) for l in lines]
first = {}
for r in recs:
    if "request" in r:
        b = r["request"]["rollout_batch_id"]
        first[b] = min(first.get(b, 1 << 62), submit[r["request"]["request_id"]])
out = []
for l, r in zip(lines, recs):
    if "rollout_batch" in r and r["rollout_batch"]["rollout_batch_id"] == "rollout-1":
        gap = first["rollout-1"] - ready["rollout-0"]
        r["rollout_batch"]["after_batch"] = {"previous_rollout_batch_id": "rollout-0", "driver_gap_ns": str(gap)}
        print(dst.name, "gap_ms", gap / 1e6)
        l = json.dumps(r, separators=(",", ":"))
    out.append(l)
data = ("\n".join(out) + "\n").encode()
(dst / "workload.jsonl").write_bytes(data)
mf = json.loads((dst / "manifest.json").read_text())
for a in mf["artifacts"]:
    if a["path"] == "workload.jsonl":
        a["sha256"] = hashlib.sha256(data).hexdigest()
        if "size_bytes" in a: a["size_bytes"] = str(len(data))
(dst / "manifest.json").write_text(json.dumps(mf, indent=2) + "\n")
