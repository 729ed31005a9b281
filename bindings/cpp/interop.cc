// Interop writer / reader of unirl_replay.v1 traces in C++ (libprotobuf, util/json_util).
//
//   interop write OUT_DIR jsonl|binpb          a small complete trace (the interop trace, bindings/README.md)
//   interop copy  SRC_DIR OUT_DIR jsonl|binpb  read a trace (either encoding) and write it again
//   interop parse TYPE IN_JSON OUT_JSON        parse one JSON document the tool wrote (TYPE: ReplayResult,
//                                              ValidationReport, TraceCheck, ReferenceProbeArtifact, ...) with unknown
//                                              fields refused,
//                                              and print it again
//
// JSON is the JSON profile of docs/json-profile.md: MessageToJsonString with proto field names,
// compact lines; binpb is SerializeDelimitedToOstream / ParseDelimitedFromZeroCopyStream.
// sha256 is implemented below (FIPS 180-4) to need nothing beyond libprotobuf.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>
#include <google/protobuf/util/json_util.h>

#include "unirl_replay/v1/manifest.pb.h"
#include "unirl_replay/v1/outcomes.pb.h"
#include "unirl_replay/v1/replay.pb.h"
#include "unirl_replay/v1/report.pb.h"
#include "unirl_replay/v1/workload.pb.h"

namespace fs = std::filesystem;
namespace pb = google::protobuf;
using namespace unirl_replay::v1;

static std::string Sha256Hex(const std::string& data) {
  static const uint32_t K[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
      0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
      0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
      0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
      0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
      0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
      0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string m = data;
  uint64_t bits = uint64_t(data.size()) * 8;
  m.push_back(char(0x80));
  while (m.size() % 64 != 56) m.push_back(0);
  for (int i = 7; i >= 0; --i) m.push_back(char((bits >> (8 * i)) & 0xff));
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (uint32_t(uint8_t(m[off + 4 * i])) << 24) | (uint32_t(uint8_t(m[off + 4 * i + 1])) << 16) |
             (uint32_t(uint8_t(m[off + 4 * i + 2])) << 8) | uint32_t(uint8_t(m[off + 4 * i + 3]));
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  char out[65];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h[i]);
  return std::string(out, 64);
}

[[noreturn]] static void Die(const std::string& why) {
  std::cerr << "interop: " << why << "\n";
  std::exit(1);
}

static std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) Die("cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

static void WriteFile(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary);
  out << data;
  if (!out) Die("cannot write " + p.string());
}

struct Artifact {
  std::string bytes;
  uint64_t count = 0;
  void Add(const pb::Message& m, const std::string& enc) {
    if (enc == "jsonl") {
      pb::util::JsonPrintOptions opt;
      opt.preserve_proto_field_names = true;
      std::string line;
      auto st = pb::util::MessageToJsonString(m, &line, opt);
      if (!st.ok()) Die(st.ToString());
      bytes += line + "\n";
    } else {
      std::ostringstream s;
      if (!pb::util::SerializeDelimitedToOstream(m, &s)) Die("serialize failed");
      bytes += s.str();
    }
    ++count;
  }
  ArtifactDigest Finish(const fs::path& dir, ArtifactKind kind, const std::string& name, const std::string& enc) {
    WriteFile(dir / name, bytes);
    ArtifactDigest a;
    a.set_kind(kind);
    a.set_path(name);
    a.set_encoding(enc == "jsonl" ? ENCODING_JSONL : ENCODING_BINPB);
    a.set_sha256(Sha256Hex(bytes));
    a.set_record_count(count);
    a.set_size_bytes(bytes.size());
    return a;
  }
};

static void WriteTrace(const fs::path& dir, const std::string& enc, TraceManifest m,
                       const std::vector<WorkloadRecord>& workload, const std::vector<OutcomeRecord>& outcomes) {
  fs::create_directories(dir);
  Artifact w, o;
  for (const auto& r : workload) w.Add(r, enc);
  for (const auto& r : outcomes) o.Add(r, enc);
  m.clear_artifacts();
  *m.add_artifacts() = w.Finish(dir, ARTIFACT_KIND_WORKLOAD, "workload." + enc, enc);
  *m.add_artifacts() = o.Finish(dir, ARTIFACT_KIND_OUTCOMES, "outcomes." + enc, enc);
  pb::util::JsonPrintOptions opt;
  opt.preserve_proto_field_names = true;
  opt.add_whitespace = true;
  std::string text;
  auto st = pb::util::MessageToJsonString(m, &text, opt);
  if (!st.ok()) Die(st.ToString());
  fs::path tmp = dir / ".manifest.json.tmp";  // written last, atomically
  WriteFile(tmp, text + "\n");
  fs::rename(tmp, dir / "manifest.json");
}

template <typename M>
static std::vector<M> Read(const fs::path& p, const std::string& enc) {
  std::vector<M> out;
  std::string data = ReadFile(p);
  if (enc == "jsonl") {
    std::istringstream in(data);
    std::string line;
    while (std::getline(in, line)) {
      M m;
      auto st = pb::util::JsonStringToMessage(line, &m);
      if (!st.ok()) Die(p.string() + ": " + st.ToString());
      out.push_back(std::move(m));
    }
  } else {
    pb::io::ArrayInputStream in(data.data(), int(data.size()));
    while (true) {
      M m;
      bool clean_eof = false;
      if (!pb::util::ParseDelimitedFromZeroCopyStream(&m, &in, &clean_eof)) {
        if (clean_eof) break;
        Die(p.string() + ": bad frame");
      }
      out.push_back(std::move(m));
    }
  }
  return out;
}

static void Copy(const fs::path& src, const fs::path& out, const std::string& enc) {
  TraceManifest m;
  auto st = pb::util::JsonStringToMessage(ReadFile(src / "manifest.json"), &m);
  if (!st.ok()) Die("manifest.json: " + st.ToString());
  std::vector<WorkloadRecord> w;
  std::vector<OutcomeRecord> o;
  for (const auto& a : m.artifacts()) {
    std::string e = a.encoding() == ENCODING_JSONL ? "jsonl" : "binpb";
    if (a.kind() == ARTIFACT_KIND_WORKLOAD) w = Read<WorkloadRecord>(src / a.path(), e);
    else o = Read<OutcomeRecord>(src / a.path(), e);
  }
  WriteTrace(out, enc, m, w, o);
}

// The interop trace (bindings/README.md): one n=2 GRPO request, its group and batch, their outcomes.
static void WriteInterop(const fs::path& out, const std::string& enc) {
  TraceManifest m;
  m.set_schema_version("unirl_replay.v1");
  m.set_contract_revision(4);
  m.set_trace_id("interop");
  m.mutable_producer()->set_name("unirl-replay-interop");
  m.mutable_producer()->set_version("1");
  auto* pv = m.mutable_provenance();
  pv->set_unirl_version("0.2.0");
  pv->set_inference_backend("vllm");
  pv->set_inference_backend_version("0.28.0");
  pv->set_simulator_name("ai-dynamo");
  pv->set_simulator_version("1.6.1");
  auto* mo = m.mutable_model();
  mo->set_name("tiny");
  mo->set_architecture("qwen2");
  mo->set_num_layers(2);
  mo->set_hidden_size(64);
  mo->set_num_attention_heads(4);
  mo->set_num_kv_heads(2);
  mo->set_vocab_size(1000);
  auto* en = m.add_engines();
  en->set_engine_id("e0");
  en->add_worker_ids("w0");
  en->set_tp_size(1);
  en->set_block_size_tokens(16);
  en->set_num_kv_blocks(1024);
  en->set_max_num_seqs(8);
  en->set_max_num_batched_tokens(2048);
  en->set_max_model_len(4096);
  en->set_dtype("float32");
  auto* hw = m.mutable_hardware();
  hw->set_description("interop");
  hw->set_accelerator("cpu");
  hw->set_cpu_count(2);
  hw->set_memory_bytes(25000000000ULL);
  m.mutable_policy()->set_policy_version(0);
  m.mutable_policy()->set_checkpoint("ckpt");
  m.mutable_window()->set_start_unix_ns(1700000000000000000LL);
  m.mutable_window()->set_duration_ns(60000000000LL);
  m.mutable_window()->set_clock_domain(CLOCK_DOMAIN_CAPTURE_MONOTONIC);
  m.mutable_privacy()->set_content(CONTENT_POLICY_EXCLUDED);
  m.mutable_privacy()->set_hash_salt_id("salt0");
  m.mutable_privacy()->set_hash_algorithm("test");
  m.set_role(WORKLOAD_ROLE_UNLABELLED);
  m.set_workload_name("interop");
  m.set_cache_state(CACHE_STATE_KIND_COLD);
  m.set_created_at("2026-01-01T00:00:00Z");

  std::vector<WorkloadRecord> w(3);
  auto* r = w[0].mutable_request();
  r->set_request_id("req-0");
  r->add_sample_ids("req-0/s0");
  r->add_sample_ids("req-0/s1");
  r->set_num_samples(2);
  r->set_group_id("g0");
  r->set_rollout_batch_id("b0");
  r->set_engine_id("e0");
  r->set_worker_id("w0");
  r->set_policy_version(0);
  r->set_input_tokens(40);
  r->add_output_tokens(8);
  r->add_output_tokens(5);
  r->mutable_prefix()->set_block_size_tokens(16);
  r->mutable_prefix()->add_block_hashes(18446744073709551615ULL);
  r->mutable_prefix()->add_block_hashes(1);
  r->mutable_prefix()->add_block_hashes(9007199254740993ULL);
  r->mutable_arrival()->set_observed_offset_ns(0);
  r->add_finish_reasons(FINISH_REASON_STOP);
  r->add_finish_reasons(FINISH_REASON_LENGTH);
  r->set_max_output_tokens(8);
  auto* g = w[1].mutable_group();
  g->set_group_id("g0");
  g->set_rollout_batch_id("b0");
  g->set_unit(GROUP_UNIT_SAMPLES);
  g->set_expected_size(2);
  g->add_member_ids("req-0");
  auto* b = w[2].mutable_rollout_batch();
  b->set_rollout_batch_id("b0");
  b->add_group_ids("g0");
  b->set_readiness_rule(BATCH_READINESS_RULE_ALL_GROUPS);
  b->add_engine_ids("e0");

  std::vector<OutcomeRecord> o(3);
  auto* ro = o[0].mutable_request();
  ro->set_request_id("req-0");
  ro->set_submit_ns(0);
  ro->set_queued_ns(1000);
  ro->set_scheduled_ns(2000);
  ro->set_first_token_ns(5000000);
  ro->set_completion_ns(9000000);
  ro->set_cached_tokens(0);
  auto* s0 = ro->add_samples();
  s0->set_sample_id("req-0/s0");
  s0->set_first_token_ns(5000000);
  s0->set_completion_ns(9000000);
  auto* s1 = ro->add_samples();
  s1->set_sample_id("req-0/s1");
  s1->set_first_token_ns(5000000);
  s1->set_completion_ns(7000000);
  o[1].mutable_group()->set_group_id("g0");
  o[1].mutable_group()->set_completed_ns(9000000);
  o[2].mutable_rollout_batch()->set_rollout_batch_id("b0");
  o[2].mutable_rollout_batch()->set_ready_ns(9000000);
  WriteTrace(out, enc, m, w, o);
}

// One JSON document as the named message of the v1 package (JsonStringToMessage's defaults: unknown fields
// refused), printed again with proto field names.
static void Parse(const std::string& type, const fs::path& in, const fs::path& out) {
  // every message type of the v1 package is linked in; these name the documents the tool writes
  const pb::Message* protos[] = {&ReplayResult::default_instance(), &ValidationReport::default_instance(),
                                 &TraceCheck::default_instance(), &TraceManifest::default_instance(),
                                 &ReferenceProbe::default_instance(), &ReferenceProbeArtifact::default_instance()};
  const pb::Descriptor* d = pb::DescriptorPool::generated_pool()->FindMessageTypeByName("unirl_replay.v1." + type);
  if (d == nullptr) Die("no message unirl_replay.v1." + type);
  const pb::Message* proto = pb::MessageFactory::generated_factory()->GetPrototype(d);
  (void)protos;
  std::unique_ptr<pb::Message> m(proto->New());
  auto st = pb::util::JsonStringToMessage(ReadFile(in), m.get());
  if (!st.ok()) Die(in.string() + ": " + st.ToString());
  pb::util::JsonPrintOptions opt;
  opt.preserve_proto_field_names = true;
  std::string text;
  st = pb::util::MessageToJsonString(*m, &text, opt);
  if (!st.ok()) Die(st.ToString());
  WriteFile(out, text);
}

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 3 && a[0] == "write") {
    WriteInterop(a[1], a[2]);
  } else if (a.size() == 4 && a[0] == "copy") {
    Copy(a[1], a[2], a[3]);
  } else if (a.size() == 4 && a[0] == "parse") {
    Parse(a[1], a[2], a[3]);
  } else {
    std::cerr << "usage: interop write OUT_DIR jsonl|binpb | copy SRC_DIR OUT_DIR jsonl|binpb | parse TYPE IN_JSON OUT_JSON\n";
    return 2;
  }
  return 0;
}
