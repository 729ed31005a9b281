// Interop writer / reader of unirl_replay.v1 traces in Java (protobuf-java + protobuf-java-util).
//
//   java Interop write OUT_DIR jsonl|binpb        a small complete trace (the interop trace, bindings/README.md)
//   java Interop copy  SRC_DIR OUT_DIR jsonl|binpb read a trace (either encoding) and write it again
//   java Interop parse TYPE IN_JSON OUT_JSON       parse one JSON document the tool wrote (TYPE: ReplayResult,
//                                                  ValidationReport, TraceCheck, TraceManifest, ReferenceProbeArtifact) with unknown
//                                                  fields refused, and print it again
//
// JSON is the JSON profile of docs/json-profile.md: JsonFormat with proto field names, compact
// lines, manifest pretty-printed. binpb is writeDelimitedTo / parseDelimitedFrom.
package io.unirl_replay.interop;

import com.google.protobuf.Message;
import com.google.protobuf.util.JsonFormat;
import io.unirl_replay.v1.*;
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.security.MessageDigest;
import java.util.*;

public final class Interop {
  static final JsonFormat.Printer LINE = JsonFormat.printer().preservingProtoFieldNames().omittingInsignificantWhitespace();
  static final JsonFormat.Printer PRETTY = JsonFormat.printer().preservingProtoFieldNames();
  static final JsonFormat.Parser PARSER = JsonFormat.parser();

  /** Accumulates one artifact: bytes, sha256, record count. */
  static final class Artifact {
    final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    long count = 0;
    void add(Message m, String enc) throws IOException {
      if (enc.equals("jsonl")) {
        bytes.write((LINE.print(m) + "\n").getBytes(StandardCharsets.UTF_8));
      } else {
        m.writeDelimitedTo(bytes);
      }
      count++;
    }
    ArtifactDigest finish(Path dir, ArtifactKind kind, String name, String enc) throws Exception {
      byte[] b = bytes.toByteArray();
      Files.write(dir.resolve(name), b);
      StringBuilder hex = new StringBuilder();
      for (byte x : MessageDigest.getInstance("SHA-256").digest(b)) hex.append(String.format("%02x", x));
      return ArtifactDigest.newBuilder().setKind(kind).setPath(name)
          .setEncoding(enc.equals("jsonl") ? Encoding.ENCODING_JSONL : Encoding.ENCODING_BINPB)
          .setSha256(hex.toString()).setRecordCount(count).setSizeBytes(b.length).build();
    }
  }

  static void writeTrace(Path dir, String enc, TraceManifest manifest, List<WorkloadRecord> workload,
                         List<OutcomeRecord> outcomes) throws Exception {
    Files.createDirectories(dir);
    Artifact w = new Artifact(), o = new Artifact();
    for (WorkloadRecord r : workload) w.add(r, enc);
    for (OutcomeRecord r : outcomes) o.add(r, enc);
    TraceManifest.Builder m = manifest.toBuilder().clearArtifacts();
    m.addArtifacts(w.finish(dir, ArtifactKind.ARTIFACT_KIND_WORKLOAD, "workload." + enc, enc));
    m.addArtifacts(o.finish(dir, ArtifactKind.ARTIFACT_KIND_OUTCOMES, "outcomes." + enc, enc));
    Path tmp = dir.resolve(".manifest.json.tmp");  // written last, atomically
    Files.write(tmp, (PRETTY.print(m.build()) + "\n").getBytes(StandardCharsets.UTF_8));
    Files.move(tmp, dir.resolve("manifest.json"), StandardCopyOption.ATOMIC_MOVE);
  }

  static <B extends Message.Builder> List<Message> read(Path file, String enc, B proto) throws IOException {
    List<Message> out = new ArrayList<>();
    if (enc.equals("jsonl")) {
      for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
        Message.Builder b = proto.clone().clear();
        PARSER.merge(line, b);
        out.add(b.build());
      }
    } else {
      try (InputStream in = new BufferedInputStream(Files.newInputStream(file))) {
        while (true) {
          Message.Builder b = proto.clone().clear();
          if (!b.mergeDelimitedFrom(in)) break;
          out.add(b.build());
        }
      }
    }
    return out;
  }

  static void copy(Path src, Path out, String enc) throws Exception {
    TraceManifest.Builder mb = TraceManifest.newBuilder();
    PARSER.merge(Files.readString(src.resolve("manifest.json")), mb);
    TraceManifest m = mb.build();
    List<WorkloadRecord> w = new ArrayList<>();
    List<OutcomeRecord> o = new ArrayList<>();
    for (ArtifactDigest a : m.getArtifactsList()) {
      String e = a.getEncoding() == Encoding.ENCODING_JSONL ? "jsonl" : "binpb";
      if (a.getKind() == ArtifactKind.ARTIFACT_KIND_WORKLOAD) {
        for (Message x : read(src.resolve(a.getPath()), e, WorkloadRecord.newBuilder())) w.add((WorkloadRecord) x);
      } else {
        for (Message x : read(src.resolve(a.getPath()), e, OutcomeRecord.newBuilder())) o.add((OutcomeRecord) x);
      }
    }
    writeTrace(out, enc, m, w, o);
  }

  // The interop trace (bindings/README.md): one n=2 GRPO request, its group and batch, their outcomes.
  static void writeInterop(Path out, String enc) throws Exception {
    TraceManifest m = TraceManifest.newBuilder()
        .setSchemaVersion("unirl_replay.v1").setContractRevision(4).setTraceId("interop")
        .setProducer(Producer.newBuilder().setName("unirl-replay-interop").setVersion("1"))
        .setProvenance(Provenance.newBuilder().setUnirlVersion("0.2.0").setInferenceBackend("vllm")
            .setInferenceBackendVersion("0.28.0").setSimulatorName("ai-dynamo").setSimulatorVersion("1.6.1"))
        .setModel(ModelIdentity.newBuilder().setName("tiny").setArchitecture("qwen2").setNumLayers(2).setHiddenSize(64)
            .setNumAttentionHeads(4).setNumKvHeads(2).setVocabSize(1000))
        .addEngines(EngineConfig.newBuilder().setEngineId("e0").addWorkerIds("w0").setTpSize(1).setBlockSizeTokens(16)
            .setNumKvBlocks(1024).setMaxNumSeqs(8).setMaxNumBatchedTokens(2048).setMaxModelLen(4096).setDtype("float32"))
        .setHardware(Hardware.newBuilder().setDescription("interop").setAccelerator("cpu").setCpuCount(2)
            .setMemoryBytes(25000000000L))
        .setPolicy(PolicyIdentity.newBuilder().setPolicyVersion(0).setCheckpoint("ckpt"))
        .setWindow(CaptureWindow.newBuilder().setStartUnixNs(1700000000000000000L).setDurationNs(60000000000L)
            .setClockDomain(ClockDomain.CLOCK_DOMAIN_CAPTURE_MONOTONIC))
        .setPrivacy(Privacy.newBuilder().setContent(ContentPolicy.CONTENT_POLICY_EXCLUDED).setHashSaltId("salt0")
            .setHashAlgorithm("test"))
        .setRole(WorkloadRole.WORKLOAD_ROLE_UNLABELLED).setWorkloadName("interop")
        .setCacheState(CacheStateKind.CACHE_STATE_KIND_COLD).setCreatedAt("2026-01-01T00:00:00Z")
        .build();
    List<WorkloadRecord> w = List.of(
        WorkloadRecord.newBuilder().setRequest(Request.newBuilder().setRequestId("req-0")
            .addSampleIds("req-0/s0").addSampleIds("req-0/s1").setNumSamples(2).setGroupId("g0").setRolloutBatchId("b0")
            .setEngineId("e0").setWorkerId("w0").setPolicyVersion(0).setInputTokens(40).addOutputTokens(8).addOutputTokens(5)
            .setPrefix(PrefixBlocks.newBuilder().setBlockSizeTokens(16).addBlockHashes(-1L)  // 2^64-1 as uint64
                .addBlockHashes(1L).addBlockHashes(9007199254740993L))
            .setArrival(Arrival.newBuilder().setObservedOffsetNs(0))
            .addFinishReasons(FinishReason.FINISH_REASON_STOP).addFinishReasons(FinishReason.FINISH_REASON_LENGTH)
            .setMaxOutputTokens(8)).build(),
        WorkloadRecord.newBuilder().setGroup(Group.newBuilder().setGroupId("g0").setRolloutBatchId("b0")
            .setUnit(GroupUnit.GROUP_UNIT_SAMPLES).setExpectedSize(2).addMemberIds("req-0")).build(),
        WorkloadRecord.newBuilder().setRolloutBatch(RolloutBatch.newBuilder().setRolloutBatchId("b0").addGroupIds("g0")
            .setReadinessRule(BatchReadinessRule.BATCH_READINESS_RULE_ALL_GROUPS).addEngineIds("e0")).build());
    List<OutcomeRecord> o = List.of(
        OutcomeRecord.newBuilder().setRequest(RequestOutcome.newBuilder().setRequestId("req-0").setSubmitNs(0)
            .setQueuedNs(1000).setScheduledNs(2000).setFirstTokenNs(5000000).setCompletionNs(9000000).setCachedTokens(0)
            .addSamples(SampleTiming.newBuilder().setSampleId("req-0/s0").setFirstTokenNs(5000000).setCompletionNs(9000000))
            .addSamples(SampleTiming.newBuilder().setSampleId("req-0/s1").setFirstTokenNs(5000000).setCompletionNs(7000000)))
            .build(),
        OutcomeRecord.newBuilder().setGroup(GroupOutcome.newBuilder().setGroupId("g0").setCompletedNs(9000000)).build(),
        OutcomeRecord.newBuilder().setRolloutBatch(BatchOutcome.newBuilder().setRolloutBatchId("b0").setReadyNs(9000000))
            .build());
    writeTrace(out, enc, m, w, o);
  }

  /** One JSON document as the named v1 message (JsonFormat.parser()'s default: unknown fields refused), printed again. */
  static void parse(String type, Path in, Path out) throws Exception {
    Map<String, Message.Builder> types = new HashMap<>();
    types.put("ReplayResult", ReplayResult.newBuilder());
    types.put("ValidationReport", ValidationReport.newBuilder());
    types.put("TraceCheck", TraceCheck.newBuilder());
    types.put("TraceManifest", TraceManifest.newBuilder());
    types.put("ReferenceProbe", ReferenceProbe.newBuilder());
    types.put("ReferenceProbeArtifact", ReferenceProbeArtifact.newBuilder());
    Message.Builder b = types.get(type);
    if (b == null) {
      System.err.println("interop: no message unirl_replay.v1." + type + " in this program");
      System.exit(1);
    }
    PARSER.merge(new String(Files.readAllBytes(in), StandardCharsets.UTF_8), b);
    Files.write(out, PRETTY.print(b.build()).getBytes(StandardCharsets.UTF_8));
  }

  public static void main(String[] args) throws Exception {
    if (args.length == 3 && args[0].equals("write")) {
      writeInterop(Paths.get(args[1]), args[2]);
    } else if (args.length == 4 && args[0].equals("copy")) {
      copy(Paths.get(args[1]), Paths.get(args[2]), args[3]);
    } else if (args.length == 4 && args[0].equals("parse")) {
      parse(args[1], Paths.get(args[2]), Paths.get(args[3]));
    } else {
      System.err.println("usage: Interop write OUT_DIR jsonl|binpb | copy SRC_DIR OUT_DIR jsonl|binpb | parse TYPE IN_JSON OUT_JSON");
      System.exit(2);
    }
  }
}
