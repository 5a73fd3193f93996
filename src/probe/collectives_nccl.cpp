// `probe collectives`: all-reduce, all-to-all and the per-pair send/receive
// matrix over every visible GPU, with NCCL loaded through dlopen.
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "probe/gpu_cuda.h"
#include "probe/gpu_probes.h"

namespace tokenscope::probe {

// Long: NCCL's setup, the size sweep and the teardown in sequence, sharing
// the communicators and buffers.
CollectivesResult run_collectives_probe(const CollectivesSettings& s) {
  CollectivesResult r;
  r.settings = s;
  r.env = gpu_environment();
  if (!r.env.available) {
    r.reason = r.env.reason;
    return r;
  }
  void* lib = nullptr;
  for (const char* n : {"libnccl.so.2", "libnccl.so", "/usr/local/cuda/lib64/libnccl.so.2"}) {
    lib = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
  }
  if (!lib) {
    r.reason = "libnccl.so.2 not found";
    return r;
  }
  struct {
    decltype(&::ncclGetVersion) version;
    decltype(&::ncclCommInitAll) init_all;
    decltype(&::ncclCommDestroy) destroy;
    decltype(&::ncclAllReduce) all_reduce;
    decltype(&::ncclSend) send;
    decltype(&::ncclRecv) recv;
    decltype(&::ncclGroupStart) group_start;
    decltype(&::ncclGroupEnd) group_end;
    decltype(&::ncclGetErrorString) error_string;
  } nc{};
  auto bind = [&](const char* n, auto& f) {
    f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, n));
    return f != nullptr;
  };
  if (!bind("ncclGetVersion", nc.version) || !bind("ncclCommInitAll", nc.init_all) ||
      !bind("ncclCommDestroy", nc.destroy) || !bind("ncclAllReduce", nc.all_reduce) ||
      !bind("ncclSend", nc.send) || !bind("ncclRecv", nc.recv) || !bind("ncclGroupStart", nc.group_start) ||
      !bind("ncclGroupEnd", nc.group_end) || !bind("ncclGetErrorString", nc.error_string)) {
    r.reason = "libnccl.so.2 lacks an entry point this probe needs";
    return r;
  }
  int v = 0;
  nc.version(&v);
  r.nccl_version =
      std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
  const int n = static_cast<int>(r.env.devices.size());
  r.ranks = n;
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(n));
  std::vector<int> devs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) devs[static_cast<std::size_t>(i)] = i;
  if (ncclResult_t rc = nc.init_all(comms.data(), n, devs.data()); rc != ncclSuccess) {
    r.reason = std::string("ncclCommInitAll: ") + nc.error_string(rc);
    return r;
  }
  const std::uint64_t max_bytes = std::max<std::uint64_t>(s.max_bytes, 8);
  std::vector<float*> send(static_cast<std::size_t>(n)), recv(static_cast<std::size_t>(n));
  std::vector<cudaStream_t> streams(static_cast<std::size_t>(n));
  std::vector<cudaEvent_t> start(static_cast<std::size_t>(n)), stop(static_cast<std::size_t>(n));
  std::string error;
  CudaCheck ok{&error};
  for (int i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    cudaSetDevice(i);
    ok(cudaMalloc(&send[u], max_bytes), "cudaMalloc");
    ok(cudaMalloc(&recv[u], max_bytes), "cudaMalloc");
    if (send[u]) cudaMemset(send[u], 0, max_bytes);
    cudaStreamCreateWithFlags(&streams[u], cudaStreamNonBlocking);
    cudaEventCreate(&start[u]);
    cudaEventCreate(&stop[u]);
  }
  if (!error.empty()) {
    r.reason = error;
    return r;
  }
  // Runs op() `iterations` times after warm-up; returns us per call (the
  // slowest rank's).
  auto time_op = [&](auto&& op) {
    for (int w = 0; w < s.warmup; ++w) op();
    for (int i = 0; i < n; ++i) {
      cudaSetDevice(i);
      cudaStreamSynchronize(streams[static_cast<std::size_t>(i)]);
      cudaEventRecord(start[static_cast<std::size_t>(i)], streams[static_cast<std::size_t>(i)]);
    }
    for (int it = 0; it < s.iterations; ++it) op();
    double worst = 0;
    for (int i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      cudaSetDevice(i);
      cudaEventRecord(stop[u], streams[u]);
      cudaEventSynchronize(stop[u]);
      float ms = 0;
      cudaEventElapsedTime(&ms, start[u], stop[u]);
      worst = std::max(worst, static_cast<double>(ms));
    }
    return worst * 1e3 / std::max(1, s.iterations);
  };
  const double ar_factor = busbw_factor("all_reduce", n).value_or(0.0);
  const double a2a_factor = busbw_factor("alltoall", n).value_or(0.0);
  for (std::uint64_t bytes = std::max<std::uint64_t>(s.min_bytes, 4 * static_cast<std::uint64_t>(n));
       bytes <= max_bytes; bytes *= static_cast<std::uint64_t>(std::max(2, s.factor))) {
    const std::size_t count = bytes / sizeof(float);
    const double t_ar = time_op([&] {
      nc.group_start();
      for (int i = 0; i < n; ++i) {
        const auto u = static_cast<std::size_t>(i);
        nc.all_reduce(send[u], recv[u], count, ncclFloat, ncclSum, comms[u], streams[u]);
      }
      nc.group_end();
    });
    CollectiveRow ar;
    ar.bytes = static_cast<double>(count * sizeof(float));
    ar.count = static_cast<double>(count);
    ar.type = "float";
    ar.redop = "sum";
    ar.time_us = t_ar;
    ar.algbw_gbps = ar.bytes / (t_ar * 1e3);
    ar.busbw_gbps = ar.algbw_gbps * ar_factor;
    r.all_reduce.push_back(ar);
    const std::size_t per_peer = count / static_cast<std::size_t>(n);
    if (per_peer == 0) continue;
    const double t_a2a = time_op([&] {
      nc.group_start();
      for (int i = 0; i < n; ++i) {
        const auto u = static_cast<std::size_t>(i);
        for (int p = 0; p < n; ++p) {
          nc.send(send[u] + static_cast<std::size_t>(p) * per_peer, per_peer, ncclFloat, p, comms[u],
                  streams[u]);
          nc.recv(recv[u] + static_cast<std::size_t>(p) * per_peer, per_peer, ncclFloat, p, comms[u],
                  streams[u]);
        }
      }
      nc.group_end();
    });
    CollectiveRow a2a;
    a2a.bytes = static_cast<double>(per_peer * static_cast<std::size_t>(n) * sizeof(float));
    a2a.count = static_cast<double>(per_peer * static_cast<std::size_t>(n));
    a2a.type = "float";
    a2a.redop = "none";
    a2a.time_us = t_a2a;
    a2a.algbw_gbps = a2a.bytes / (t_a2a * 1e3);
    a2a.busbw_gbps = a2a.algbw_gbps * a2a_factor;
    r.alltoall.push_back(a2a);
  }
  r.all_reduce_analysis = analyze_collective("all_reduce", n, r.all_reduce);
  r.alltoall_analysis = analyze_collective("alltoall", n, r.alltoall);
  if (s.pairs && n > 1) {
    const std::size_t count = max_bytes / sizeof(float);
    r.pair_gbps.assign(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(n), 0.0));
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        const auto ua = static_cast<std::size_t>(a), ub = static_cast<std::size_t>(b);
        const double us = time_op([&] {
          nc.group_start();
          nc.send(send[ua], count, ncclFloat, b, comms[ua], streams[ua]);
          nc.recv(recv[ub], count, ncclFloat, a, comms[ub], streams[ub]);
          nc.group_end();
        });
        r.pair_gbps[ua][ub] = static_cast<double>(count * sizeof(float)) / (us * 1e3);
      }
    r.slow = slow_pairs(r.pair_gbps);
  }
  for (int i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    cudaSetDevice(i);
    cudaFree(send[u]);
    cudaFree(recv[u]);
    cudaStreamDestroy(streams[u]);
    cudaEventDestroy(start[u]);
    cudaEventDestroy(stop[u]);
    nc.destroy(comms[u]);
  }
  r.ran = true;
  return r;
}

}  // namespace tokenscope::probe
