// Interop writer / reader of unirl_replay.v1 traces in Go (google.golang.org/protobuf, APIv2).
//
//	interop write OUT_DIR jsonl|binpb          a small complete trace (the interop trace, bindings/README.md)
//	interop copy  SRC_DIR OUT_DIR jsonl|binpb  read a trace (either encoding) and write it again
//	interop parse TYPE IN_JSON OUT_JSON        parse one JSON document the tool wrote (TYPE: a message of
//	                                           unirl_replay.v1, e.g. ReplayResult) with unknown fields refused,
//	                                           and print it again
//
// JSON is the JSON profile of docs/json-profile.md: protojson with UseProtoNames. protojson
// deliberately varies its whitespace between builds, so each line goes through json.Compact (key
// order and values unchanged) to get the profile's compact lines. binpb is varint length + message.
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	v1 "unirl-replay.invalid/gen/go/unirl_replay/v1"
)

type artifact struct {
	buf   bytes.Buffer
	count uint64
}

func (a *artifact) add(m proto.Message, enc string) {
	if enc == "jsonl" {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
		check(err)
		check(json.Compact(&a.buf, b))
		a.buf.WriteByte('\n')
	} else {
		b, err := proto.Marshal(m)
		check(err)
		a.buf.Write(protowire.AppendVarint(nil, uint64(len(b))))
		a.buf.Write(b)
	}
	a.count++
}

func (a *artifact) finish(dir string, kind v1.ArtifactKind, name, enc string) *v1.ArtifactDigest {
	b := a.buf.Bytes()
	check(os.WriteFile(filepath.Join(dir, name), b, 0o644))
	sum := sha256.Sum256(b)
	e := v1.Encoding_ENCODING_BINPB
	if enc == "jsonl" {
		e = v1.Encoding_ENCODING_JSONL
	}
	return &v1.ArtifactDigest{Kind: kind, Path: name, Encoding: e, Sha256: hex.EncodeToString(sum[:]),
		RecordCount: a.count, SizeBytes: uint64(len(b))}
}

func writeTrace(dir, enc string, m *v1.TraceManifest, workload []*v1.WorkloadRecord, outcomes []*v1.OutcomeRecord) {
	check(os.MkdirAll(dir, 0o755))
	var w, o artifact
	for _, r := range workload {
		w.add(r, enc)
	}
	for _, r := range outcomes {
		o.add(r, enc)
	}
	m = proto.Clone(m).(*v1.TraceManifest)
	m.Artifacts = []*v1.ArtifactDigest{
		w.finish(dir, v1.ArtifactKind_ARTIFACT_KIND_WORKLOAD, "workload."+enc, enc),
		o.finish(dir, v1.ArtifactKind_ARTIFACT_KIND_OUTCOMES, "outcomes."+enc, enc),
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	check(err)
	var pretty bytes.Buffer
	check(json.Indent(&pretty, b, "", "  "))
	pretty.WriteByte('\n')
	tmp := filepath.Join(dir, ".manifest.json.tmp") // written last, atomically
	check(os.WriteFile(tmp, pretty.Bytes(), 0o644))
	check(os.Rename(tmp, filepath.Join(dir, "manifest.json")))
}

// read calls add with each record of one artifact file.
func read(path, enc string, newMsg func() proto.Message, add func(proto.Message)) {
	data, err := os.ReadFile(path)
	check(err)
	if enc == "jsonl" {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			m := newMsg()
			check(protojson.Unmarshal(sc.Bytes(), m))
			add(m)
		}
		check(sc.Err())
		return
	}
	for len(data) > 0 {
		n, k := protowire.ConsumeVarint(data)
		if k < 0 || uint64(len(data)-k) < n {
			check(io.ErrUnexpectedEOF)
		}
		m := newMsg()
		check(proto.Unmarshal(data[k:k+int(n)], m))
		add(m)
		data = data[k+int(n):]
	}
}

func encName(e v1.Encoding) string {
	if e == v1.Encoding_ENCODING_JSONL {
		return "jsonl"
	}
	return "binpb"
}

func copyTrace(src, out, enc string) {
	data, err := os.ReadFile(filepath.Join(src, "manifest.json"))
	check(err)
	m := &v1.TraceManifest{}
	check(protojson.Unmarshal(data, m))
	var w []*v1.WorkloadRecord
	var o []*v1.OutcomeRecord
	for _, a := range m.Artifacts {
		p := filepath.Join(src, a.Path)
		if a.Kind == v1.ArtifactKind_ARTIFACT_KIND_WORKLOAD {
			read(p, encName(a.Encoding), func() proto.Message { return &v1.WorkloadRecord{} },
				func(x proto.Message) { w = append(w, x.(*v1.WorkloadRecord)) })
		} else {
			read(p, encName(a.Encoding), func() proto.Message { return &v1.OutcomeRecord{} },
				func(x proto.Message) { o = append(o, x.(*v1.OutcomeRecord)) })
		}
	}
	writeTrace(out, enc, m, w, o)
}

// parseDoc reads one JSON document as the named message of the v1 package (protojson's defaults: unknown
// fields refused) and writes it again with proto field names.
func parseDoc(typ, in, out string) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName("unirl_replay.v1." + typ))
	check(err)
	data, err := os.ReadFile(in)
	check(err)
	m := mt.New().Interface()
	check(protojson.Unmarshal(data, m))
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	check(err)
	check(os.WriteFile(out, b, 0o644))
}

func i64(v int64) *int64   { return &v }
func u32(v uint32) *uint32 { return &v }

// The interop trace (bindings/README.md): one n=2 GRPO request, its group and batch, their outcomes.
func writeInterop(out, enc string) {
	m := &v1.TraceManifest{
		SchemaVersion: "unirl_replay.v1", ContractRevision: 4, TraceId: "interop",
		Producer: &v1.Producer{Name: "unirl-replay-interop", Version: "1"},
		Provenance: &v1.Provenance{UnirlVersion: "0.2.0", InferenceBackend: "vllm", InferenceBackendVersion: "0.28.0",
			SimulatorName: "ai-dynamo", SimulatorVersion: "1.6.1"},
		Model: &v1.ModelIdentity{Name: "tiny", Architecture: "qwen2", NumLayers: 2, HiddenSize: 64, NumAttentionHeads: 4,
			NumKvHeads: 2, VocabSize: 1000},
		Engines: []*v1.EngineConfig{{EngineId: "e0", WorkerIds: []string{"w0"}, TpSize: 1, BlockSizeTokens: 16,
			NumKvBlocks: 1024, MaxNumSeqs: 8, MaxNumBatchedTokens: 2048, MaxModelLen: 4096, Dtype: "float32"}},
		Hardware: &v1.Hardware{Description: "interop", Accelerator: "cpu", CpuCount: 2, MemoryBytes: 25000000000},
		Policy:   &v1.PolicyIdentity{PolicyVersion: i64(0), Checkpoint: "ckpt"},
		Window: &v1.CaptureWindow{StartUnixNs: 1700000000000000000, DurationNs: 60000000000,
			ClockDomain: v1.ClockDomain_CLOCK_DOMAIN_CAPTURE_MONOTONIC},
		Privacy: &v1.Privacy{Content: v1.ContentPolicy_CONTENT_POLICY_EXCLUDED, HashSaltId: "salt0", HashAlgorithm: "test"},
		Role:    v1.WorkloadRole_WORKLOAD_ROLE_UNLABELLED, WorkloadName: "interop",
		CacheState: v1.CacheStateKind_CACHE_STATE_KIND_COLD, CreatedAt: "2026-01-01T00:00:00Z",
	}
	w := []*v1.WorkloadRecord{
		{Record: &v1.WorkloadRecord_Request{Request: &v1.Request{
			RequestId: "req-0", SampleIds: []string{"req-0/s0", "req-0/s1"}, NumSamples: 2, GroupId: "g0",
			RolloutBatchId: "b0", EngineId: "e0", WorkerId: "w0", PolicyVersion: i64(0), InputTokens: 40,
			OutputTokens:    []uint32{8, 5},
			Prefix:          &v1.PrefixBlocks{BlockSizeTokens: 16, BlockHashes: []uint64{18446744073709551615, 1, 9007199254740993}},
			Arrival:         &v1.Arrival{Kind: &v1.Arrival_ObservedOffsetNs{ObservedOffsetNs: 0}},
			FinishReasons:   []v1.FinishReason{v1.FinishReason_FINISH_REASON_STOP, v1.FinishReason_FINISH_REASON_LENGTH},
			MaxOutputTokens: u32(8)}}},
		{Record: &v1.WorkloadRecord_Group{Group: &v1.Group{GroupId: "g0", RolloutBatchId: "b0",
			Unit: v1.GroupUnit_GROUP_UNIT_SAMPLES, ExpectedSize: 2, MemberIds: []string{"req-0"}}}},
		{Record: &v1.WorkloadRecord_RolloutBatch{RolloutBatch: &v1.RolloutBatch{RolloutBatchId: "b0", GroupIds: []string{"g0"},
			ReadinessRule: v1.BatchReadinessRule_BATCH_READINESS_RULE_ALL_GROUPS, EngineIds: []string{"e0"}}}},
	}
	o := []*v1.OutcomeRecord{
		{Record: &v1.OutcomeRecord_Request{Request: &v1.RequestOutcome{RequestId: "req-0", SubmitNs: i64(0),
			QueuedNs: i64(1000), ScheduledNs: i64(2000), FirstTokenNs: i64(5000000), CompletionNs: i64(9000000),
			CachedTokens: u32(0), Samples: []*v1.SampleTiming{
				{SampleId: "req-0/s0", FirstTokenNs: i64(5000000), CompletionNs: i64(9000000)},
				{SampleId: "req-0/s1", FirstTokenNs: i64(5000000), CompletionNs: i64(7000000)}}}}},
		{Record: &v1.OutcomeRecord_Group{Group: &v1.GroupOutcome{GroupId: "g0", CompletedNs: i64(9000000)}}},
		{Record: &v1.OutcomeRecord_RolloutBatch{RolloutBatch: &v1.BatchOutcome{RolloutBatchId: "b0", ReadyNs: i64(9000000)}}},
	}
	writeTrace(out, enc, m, w, o)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(1)
	}
}

func main() {
	a := os.Args[1:]
	switch {
	case len(a) == 3 && a[0] == "write":
		writeInterop(a[1], a[2])
	case len(a) == 4 && a[0] == "copy":
		copyTrace(a[1], a[2], a[3])
	case len(a) == 4 && a[0] == "parse":
		parseDoc(a[1], a[2], a[3])
	default:
		fmt.Fprintln(os.Stderr, "usage: interop write OUT_DIR jsonl|binpb | copy SRC_DIR OUT_DIR jsonl|binpb | parse TYPE IN_JSON OUT_JSON")
		os.Exit(2)
	}
}
