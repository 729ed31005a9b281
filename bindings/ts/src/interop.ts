// Interop writer / reader of unirl_replay.v1 traces in TypeScript (protobuf-es v2).
//
//   node dist/src/interop.js write OUT_DIR jsonl|binpb          the interop trace (bindings/README.md)
//   node dist/src/interop.js copy  SRC_DIR OUT_DIR jsonl|binpb  read a trace (either encoding), write it again
//   node dist/src/interop.js parse TYPE IN_JSON OUT_JSON        parse one JSON document the tool wrote (TYPE:
//                                                                 ReplayResult, ValidationReport, TraceCheck,
//                                                                 TraceManifest, ReferenceProbeArtifact), unknown fields
//                                                                 refused; print it again
//
// JSON is the JSON profile of docs/json-profile.md: toJsonString with useProtoFieldName (64-bit
// integers are bigint in memory and decimal strings in JSON); binpb is varint length + message.
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { create, fromBinary, fromJsonString, toBinary, toJson, toJsonString } from "@bufbuild/protobuf";
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import {
  BatchReadinessRule, GroupUnit, WorkloadRecordSchema, type WorkloadRecord,
} from "../gen/unirl_replay/v1/workload_pb.js";
import { OutcomeRecordSchema, type OutcomeRecord } from "../gen/unirl_replay/v1/outcomes_pb.js";
import {
  ArtifactKind, Encoding, ReferenceProbeArtifactSchema, ReferenceProbeSchema, TraceManifestSchema, type ArtifactDigest, type TraceManifest, ArtifactDigestSchema,
} from "../gen/unirl_replay/v1/manifest_pb.js";
import { ReplayResultSchema } from "../gen/unirl_replay/v1/replay_pb.js";
import { TraceCheckSchema, ValidationReportSchema } from "../gen/unirl_replay/v1/report_pb.js";
import {
  CacheStateKind, ClockDomain, ContentPolicy, FinishReason, WorkloadRole,
} from "../gen/unirl_replay/v1/common_pb.js";

function varint(n: number): Uint8Array {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return Uint8Array.from(out);
}

class Artifact {
  parts: Uint8Array[] = [];
  count = 0n;
  add<D extends DescMessage>(schema: D, m: MessageShape<D>, enc: string): void {
    if (enc === "jsonl") {
      this.parts.push(Buffer.from(toJsonString(schema, m, { useProtoFieldName: true }) + "\n", "utf8"));
    } else {
      const b = toBinary(schema, m);
      this.parts.push(varint(b.length), b);
    }
    this.count++;
  }
  finish(dir: string, kind: ArtifactKind, name: string, enc: string): ArtifactDigest {
    const bytes = Buffer.concat(this.parts);
    writeFileSync(join(dir, name), bytes);
    return create(ArtifactDigestSchema, {
      kind, path: name, encoding: enc === "jsonl" ? Encoding.JSONL : Encoding.BINPB,
      sha256: createHash("sha256").update(bytes).digest("hex"), recordCount: this.count, sizeBytes: BigInt(bytes.length),
    });
  }
}

function writeTrace(dir: string, enc: string, m: TraceManifest, workload: WorkloadRecord[], outcomes: OutcomeRecord[]): void {
  mkdirSync(dir, { recursive: true });
  const w = new Artifact(), o = new Artifact();
  for (const r of workload) w.add(WorkloadRecordSchema, r, enc);
  for (const r of outcomes) o.add(OutcomeRecordSchema, r, enc);
  m.artifacts = [
    w.finish(dir, ArtifactKind.WORKLOAD, `workload.${enc}`, enc),
    o.finish(dir, ArtifactKind.OUTCOMES, `outcomes.${enc}`, enc),
  ];
  const tmp = join(dir, ".manifest.json.tmp"); // written last, atomically
  writeFileSync(tmp, JSON.stringify(toJson(TraceManifestSchema, m, { useProtoFieldName: true }), null, 2) + "\n");
  renameSync(tmp, join(dir, "manifest.json"));
}

function read<D extends DescMessage>(path: string, enc: string, schema: D): MessageShape<D>[] {
  const data = readFileSync(path);
  const out: MessageShape<D>[] = [];
  if (enc === "jsonl") {
    for (const line of data.toString("utf8").split("\n")) {
      if (line) out.push(fromJsonString(schema, line));
    }
    return out;
  }
  let pos = 0;
  while (pos < data.length) {
    let n = 0, shift = 1;
    for (;;) {
      const b = data[pos++];
      if (b === undefined) throw new Error(`${path}: stream ends inside a length prefix`);
      n += (b & 0x7f) * shift;
      shift *= 128;
      if (!(b & 0x80)) break;
    }
    if (pos + n > data.length) throw new Error(`${path}: stream ends inside a frame`);
    out.push(fromBinary(schema, data.subarray(pos, pos + n)));
    pos += n;
  }
  return out;
}

function copyTrace(src: string, out: string, enc: string): void {
  const m = fromJsonString(TraceManifestSchema, readFileSync(join(src, "manifest.json"), "utf8"));
  let w: WorkloadRecord[] = [], o: OutcomeRecord[] = [];
  for (const a of m.artifacts) {
    const e = a.encoding === Encoding.JSONL ? "jsonl" : "binpb";
    if (a.kind === ArtifactKind.WORKLOAD) w = read(join(src, a.path), e, WorkloadRecordSchema);
    else o = read(join(src, a.path), e, OutcomeRecordSchema);
  }
  writeTrace(out, enc, m, w, o);
}

// The interop trace (bindings/README.md): one n=2 GRPO request, its group and batch, their outcomes.
function writeInterop(out: string, enc: string): void {
  const m = create(TraceManifestSchema, {
    schemaVersion: "unirl_replay.v1", contractRevision: 4, traceId: "interop",
    producer: { name: "unirl-replay-interop", version: "1" },
    provenance: { unirlVersion: "0.2.0", inferenceBackend: "vllm", inferenceBackendVersion: "0.28.0",
      simulatorName: "ai-dynamo", simulatorVersion: "1.6.1" },
    model: { name: "tiny", architecture: "qwen2", numLayers: 2, hiddenSize: 64, numAttentionHeads: 4, numKvHeads: 2,
      vocabSize: 1000 },
    engines: [{ engineId: "e0", workerIds: ["w0"], tpSize: 1, blockSizeTokens: 16, numKvBlocks: 1024, maxNumSeqs: 8,
      maxNumBatchedTokens: 2048, maxModelLen: 4096, dtype: "float32" }],
    hardware: { description: "interop", accelerator: "cpu", cpuCount: 2, memoryBytes: 25000000000n },
    policy: { policyVersion: 0n, checkpoint: "ckpt" },
    window: { startUnixNs: 1700000000000000000n, durationNs: 60000000000n, clockDomain: ClockDomain.CAPTURE_MONOTONIC },
    privacy: { content: ContentPolicy.EXCLUDED, hashSaltId: "salt0", hashAlgorithm: "test" },
    role: WorkloadRole.UNLABELLED, workloadName: "interop", cacheState: CacheStateKind.COLD,
    createdAt: "2026-01-01T00:00:00Z",
  });
  const w = [
    create(WorkloadRecordSchema, { record: { case: "request", value: {
      requestId: "req-0", sampleIds: ["req-0/s0", "req-0/s1"], numSamples: 2, groupId: "g0", rolloutBatchId: "b0",
      engineId: "e0", workerId: "w0", policyVersion: 0n, inputTokens: 40, outputTokens: [8, 5],
      prefix: { blockSizeTokens: 16, blockHashes: [18446744073709551615n, 1n, 9007199254740993n] },
      arrival: { kind: { case: "observedOffsetNs", value: 0n } },
      finishReasons: [FinishReason.STOP, FinishReason.LENGTH], maxOutputTokens: 8 } } }),
    create(WorkloadRecordSchema, { record: { case: "group", value: {
      groupId: "g0", rolloutBatchId: "b0", unit: GroupUnit.SAMPLES, expectedSize: 2, memberIds: ["req-0"] } } }),
    create(WorkloadRecordSchema, { record: { case: "rolloutBatch", value: {
      rolloutBatchId: "b0", groupIds: ["g0"], readinessRule: BatchReadinessRule.ALL_GROUPS, engineIds: ["e0"] } } }),
  ];
  const o = [
    create(OutcomeRecordSchema, { record: { case: "request", value: {
      requestId: "req-0", submitNs: 0n, queuedNs: 1000n, scheduledNs: 2000n, firstTokenNs: 5000000n,
      completionNs: 9000000n, cachedTokens: 0, samples: [
        { sampleId: "req-0/s0", firstTokenNs: 5000000n, completionNs: 9000000n },
        { sampleId: "req-0/s1", firstTokenNs: 5000000n, completionNs: 7000000n }] } } }),
    create(OutcomeRecordSchema, { record: { case: "group", value: { groupId: "g0", completedNs: 9000000n } } }),
    create(OutcomeRecordSchema, { record: { case: "rolloutBatch", value: { rolloutBatchId: "b0", readyNs: 9000000n } } }),
  ];
  writeTrace(out, enc, m, w, o);
}

// One JSON document as the named v1 message (fromJsonString's default: unknown fields refused), printed again.
function parseDoc(type: string, input: string, out: string): void {
  const schemas: Record<string, DescMessage> = {
    ReplayResult: ReplayResultSchema, ValidationReport: ValidationReportSchema, TraceCheck: TraceCheckSchema,
    TraceManifest: TraceManifestSchema, ReferenceProbe: ReferenceProbeSchema,
    ReferenceProbeArtifact: ReferenceProbeArtifactSchema,
  };
  const schema = schemas[type];
  if (schema === undefined) {
    process.stderr.write(`interop: no message unirl_replay.v1.${type} in this program\n`);
    process.exit(1);
  }
  const m = fromJsonString(schema, readFileSync(input, "utf8"));
  writeFileSync(out, toJsonString(schema, m, { useProtoFieldName: true }));
}

const a = process.argv.slice(2);
if (a.length === 3 && a[0] === "write") {
  writeInterop(a[1], a[2]);
} else if (a.length === 4 && a[0] === "copy") {
  copyTrace(a[1], a[2], a[3]);
} else if (a.length === 4 && a[0] === "parse") {
  parseDoc(a[1], a[2], a[3]);
} else {
  process.stderr.write("usage: interop write OUT_DIR jsonl|binpb | copy SRC_DIR OUT_DIR jsonl|binpb | parse TYPE IN_JSON OUT_JSON\n");
  process.exit(2);
}
