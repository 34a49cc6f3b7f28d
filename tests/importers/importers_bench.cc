// Importer speed (docs/benchmarks.md, "Importers"). Synthetic Kineto trace
// of N NCCL kernels plus 9 x N other events, in memory:
//   - streaming SAX reader (what `pitstop analyze` uses), plain and gzipped;
//   - a whole-document json::parse of the same bytes, for the ratio;
// and the safe pickle decoder on a Flight-Recorder-shaped pickle.
#include <benchmark/benchmark.h>
#include <zlib.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "src/importers/input_file.h"
#include "src/importers/kineto_reader.h"
#include "src/importers/pickle_decoder.h"

namespace pitstop::importers {
namespace {

std::string SyntheticTrace(int kernels) {
  std::string s =
      R"({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 8}, "traceEvents": [)";
  for (int i = 0; i < kernels; ++i) {
    double ts = 1.6e15 + i * 1000.0;
    for (int j = 0; j < 9; ++j) {
      absl::StrAppend(
          &s,
          R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": )",
          ts + j, R"(, "dur": 3.0, "args": {"External id": )", i * 10 + j,
          R"(, "Input Dims": [[2048, 1024], [1024, 1024]], "Input type": ["float", "float"]}},)");
    }
    absl::StrAppend(
        &s,
        R"x({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "pid": 0, "tid": 7, "ts": )x",
        ts,
        R"(, "dur": 500.0, "args": {"stream": 7, "device": 0, "correlation": )",
        i,
        R"(, "Collective name": "allreduce", "In msg nelems": 1048576, "dtype": "Float", "Group size": 8}})",
        i + 1 < kernels ? "," : "");
  }
  s += "]}";
  return s;
}

std::string Gzip(const std::string& data) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(compressBound(data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = data.size();
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = out.size();
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

const std::string& Trace() {
  static const std::string* t = new std::string(SyntheticTrace(20000));
  return *t;
}

void BM_KinetoStreaming(benchmark::State& state) {
  const std::string& trace = Trace();
  for (auto _ : state) {
    auto in = InputStream::FromMemory(trace, "bench");
    auto t = ParseKinetoTrace(in.get(), "bench-0.json");
    benchmark::DoNotOptimize(t);
  }
  state.SetBytesProcessed(state.iterations() * trace.size());
}
BENCHMARK(BM_KinetoStreaming)->Unit(benchmark::kMillisecond);

void BM_KinetoStreamingGzip(benchmark::State& state) {
  static const std::string* gz = new std::string(Gzip(Trace()));
  for (auto _ : state) {
    auto in = InputStream::FromMemory(*gz, "bench");
    auto t = ParseKinetoTrace(in.get(), "bench-0.json.gz");
    benchmark::DoNotOptimize(t);
  }
  state.SetBytesProcessed(state.iterations() * Trace().size());
}
BENCHMARK(BM_KinetoStreamingGzip)->Unit(benchmark::kMillisecond);

void BM_WholeDocumentParse(benchmark::State& state) {
  const std::string& trace = Trace();
  for (auto _ : state) {
    nlohmann::json doc = nlohmann::json::parse(trace);
    benchmark::DoNotOptimize(doc);
  }
  state.SetBytesProcessed(state.iterations() * trace.size());
}
BENCHMARK(BM_WholeDocumentParse)->Unit(benchmark::kMillisecond);

// A pickle shaped like an FR dump: a list of N entry dicts with memoised
// keys (protocol 2).
std::string SyntheticPickle(int entries) {
  std::string p("\x80\x02]q\x00(", 6);
  const char* keys[] = {"record_id", "pg_id", "collective_seq_id",
                        "profiling_name", "state"};
  for (int i = 0; i < entries; ++i) {
    p += "}(";
    for (int k = 0; k < 5; ++k) {
      if (i == 0) {
        std::string key = keys[k];
        p += 'X';
        uint32_t n = key.size();
        p.append(reinterpret_cast<const char*>(&n), 4);
        p += key;
        p += 'q';
        p += static_cast<char>(k + 1);
      } else {
        p += 'h';
        p += static_cast<char>(k + 1);
      }
      if (k == 3) {
        p += "X";
        uint32_t n = 15;
        p.append(reinterpret_cast<const char*>(&n), 4);
        p += "nccl:all_reduce";
      } else {
        p += 'J';
        int32_t v = i;
        p.append(reinterpret_cast<const char*>(&v), 4);
      }
    }
    p += 'u';
  }
  p += "e.";
  return p;
}

void BM_PickleDecode(benchmark::State& state) {
  static const std::string* p = new std::string(SyntheticPickle(20000));
  for (auto _ : state) {
    auto doc = DecodePickle(*p, "bench");
    benchmark::DoNotOptimize(doc);
  }
  state.SetBytesProcessed(state.iterations() * p->size());
}
BENCHMARK(BM_PickleDecode)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pitstop::importers

BENCHMARK_MAIN();
