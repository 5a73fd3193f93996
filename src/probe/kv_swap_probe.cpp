// `probe kv-swap`: KV-cache eviction and restore between host and GPU —
// D2H, H2D and both at once, whole or in chunks, with and without a
// decode-like kernel beside the copies — and the latency of one tenant
// switch.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "probe/cupti_session.h"
#include "probe/gpu_cuda.h"
#include "probe/gpu_kernels.h"
#include "probe/gpu_probes.h"

namespace tokenscope::probe {

namespace {

struct SwapBuffers {
  char* host = nullptr;    // tenants x kv pinned
  char* device = nullptr;  // slots x kv
  std::uint64_t host_bytes = 0, device_bytes = 0;
  ~SwapBuffers() {
    if (host) cudaFreeHost(host);
    if (device) cudaFree(device);
  }
};

// Copies are queued behind a spinning kernel so their enqueue cost is not
// timed; the GPU's work queue is finite, though, so after kMaxQueuedCopies the
// kernel is released (`release`) and the rest is enqueued while the copies
// run, as an engine that swaps block by block pays it.
constexpr int kMaxQueuedCopies = 256;

struct CopyQueue {
  int queued = 0;
  bool released = false;
  volatile int* flag = nullptr;  // host side of the spin kernel's flag; null: nothing to release
  void count() {
    if (++queued >= kMaxQueuedCopies) release();
  }
  void release() {
    if (released || !flag) return;
    __atomic_store_n(const_cast<int*>(flag), 1, __ATOMIC_SEQ_CST);
    released = true;
  }
};

void enqueue_copy(char* dst, const char* src, std::uint64_t bytes, std::uint64_t chunk, cudaMemcpyKind kind,
                  cudaStream_t stream, CopyQueue* queue = nullptr) {
  if (chunk == 0 || chunk >= bytes) {
    cudaMemcpyAsync(dst, src, bytes, kind, stream);
    if (queue) queue->count();
    return;
  }
  for (std::uint64_t off = 0; off < bytes; off += chunk) {
    cudaMemcpyAsync(dst + off, src + off, std::min(chunk, bytes - off), kind, stream);
    if (queue) queue->count();
  }
}

}  // namespace

// Long: the probe's protocol in the order it runs on the device (allocate,
// warm up, sweep sizes and tenant counts, release); its steps share the
// device buffers and streams, which a split would pass around.
KvSwapResult run_kv_swap_probe(const KvSwapSettings& s) {
  KvSwapResult r;
  r.settings = s;
  if (!gpu_ready(r, s.device)) return r;
  std::string error;
  CudaCheck ok{&error};
  if (!ok(cudaSetDevice(s.device), "cudaSetDevice")) {
    r.reason = error;
    return r;
  }
  CuptiSession cupti(r.cupti, s.cupti);
  Nvml nvml;
  NvmlSampler sampler(nvml, s.nvml_interval_s);

  int* flag = nullptr;
  int* flag_dev = nullptr;
  if (!ok(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped), "cudaHostAlloc(mapped flag)") ||
      !ok(cudaHostGetDevicePointer(&flag_dev, flag, 0), "cudaHostGetDevicePointer")) {
    r.reason = error;
    if (flag) cudaFreeHost(flag);
    return r;
  }
  cudaStream_t s_d2h = nullptr, s_h2d = nullptr, s_decode = nullptr;
  cudaStreamCreateWithFlags(&s_d2h, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s_h2d, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s_decode, cudaStreamNonBlocking);
  cudaEvent_t e0, e1, e2, d0, d1;
  for (auto* e : {&e0, &e1, &e2, &d0, &d1}) cudaEventCreate(e);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, s.device);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, s.device);
  const long long spin_cycles = std::max(1LL, static_cast<long long>(clock_khz)) * 1000LL * 10;  // ~10 s

  // Decode kernel buffer: 1 GiB (or less where memory is short).
  std::size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  const std::size_t decode_bytes = std::min<std::size_t>(1ull << 30, free_b / 8);
  float4* decode_buf = nullptr;
  float* decode_out = nullptr;
  if (s.overlap_decode) {
    ok(cudaMalloc(&decode_buf, decode_bytes), "cudaMalloc(decode)");
    ok(cudaMalloc(&decode_out, sizeof(float)), "cudaMalloc");
    if (decode_buf) cudaMemset(decode_buf, 0, decode_bytes);
  }
  const int decode_blocks = prop.multiProcessorCount * 4;
  auto launch_decode = [&](cudaStream_t st) {
    launch_decode_kernel(decode_buf, decode_bytes / sizeof(float4), 4, decode_out, decode_blocks, 256, st);
  };
  double decode_alone_ms = 0;
  if (decode_buf) {
    std::vector<double> t;
    for (int i = 0; i < 3; ++i) {
      cudaEventRecord(d0, s_decode);
      launch_decode(s_decode);
      cudaEventRecord(d1, s_decode);
      cudaEventSynchronize(d1);
      float ms = 0;
      cudaEventElapsedTime(&ms, d0, d1);
      t.push_back(ms);
    }
    decode_alone_ms = median_ci(t).median;
  }

  // Times copies queued behind a spin kernel (enqueue cost excluded up to
  // kMaxQueuedCopies), in ms. enqueue(CopyQueue&) issues the copies.
  auto timed_copy = [&](auto&& enqueue, bool both, bool with_decode, double* decode_ms) -> double {
    *flag = 0;
    launch_spin_kernel(flag_dev, spin_cycles, s_d2h);
    cudaEventRecord(e0, s_d2h);
    if (both) cudaStreamWaitEvent(s_h2d, e0, 0);
    if (with_decode) {
      cudaStreamWaitEvent(s_decode, e0, 0);
      cudaEventRecord(d0, s_decode);
      launch_decode(s_decode);
      cudaEventRecord(d1, s_decode);
    }
    CopyQueue queue;
    queue.flag = flag;
    enqueue(queue);
    cudaEventRecord(e1, s_d2h);
    if (both) cudaEventRecord(e2, s_h2d);
    queue.release();
    cudaEventSynchronize(e1);
    float a = 0, b = 0;
    cudaEventElapsedTime(&a, e0, e1);
    if (both) {
      cudaEventSynchronize(e2);
      cudaEventElapsedTime(&b, e0, e2);
    }
    if (with_decode) {
      cudaEventSynchronize(d1);
      float m = 0;
      cudaEventElapsedTime(&m, d0, d1);
      *decode_ms = m;
    }
    return std::max(a, b);
  };

  for (int tenants : s.tenants)
    for (std::uint64_t kv : s.kv_bytes)
      for (std::uint64_t chunk : s.chunk_bytes)
        for (int overlap = 0; overlap <= (s.overlap_decode && decode_buf ? 1 : 0); ++overlap) {
          KvSwapRow row;
          row.tenants = tenants;
          row.kv_bytes = kv;
          row.chunk_bytes = chunk;
          row.overlapped = overlap == 1;
          const int resident = std::max(1, tenants / 2);
          SwapBuffers buf;
          buf.host_bytes = static_cast<std::uint64_t>(tenants) * kv;
          buf.device_bytes =
              static_cast<std::uint64_t>(resident + 1) * kv;  // one spare slot for two-way copies
          cudaMemGetInfo(&free_b, &total_b);
          if (buf.host_bytes > s.max_host_bytes) {
            row.skipped = "needs " + std::to_string(buf.host_bytes >> 20) +
                          " MiB pinned host memory (cap --max-host-mib)";
          } else if (buf.device_bytes > free_b * 0.9) {
            row.skipped = "needs " + std::to_string(buf.device_bytes >> 20) + " MiB GPU memory";
          } else if (cudaHostAlloc(&buf.host, buf.host_bytes, cudaHostAllocDefault) != cudaSuccess) {
            row.skipped = "cudaHostAlloc failed";
            cudaGetLastError();
          } else if (cudaMalloc(&buf.device, buf.device_bytes) != cudaSuccess) {
            row.skipped = "cudaMalloc failed";
            cudaGetLastError();
          }
          if (!row.skipped.empty()) {
            r.rows.push_back(row);
            continue;
          }
          std::memset(buf.host, 1, buf.host_bytes);
          cudaMemset(buf.device, 2, buf.device_bytes);
          cudaDeviceSynchronize();
          auto host_of = [&](int t) { return buf.host + static_cast<std::uint64_t>(t) * kv; };
          auto slot = [&](int i) { return buf.device + static_cast<std::uint64_t>(i) * kv; };
          std::vector<double> d2h, h2d, bidir, slow;
          for (int rep = 0; rep < s.repetitions; ++rep) {
            double dm = 0;
            double ms = timed_copy(
                [&](CopyQueue& q) {
                  enqueue_copy(host_of(0), slot(0), kv, chunk, cudaMemcpyDeviceToHost, s_d2h, &q);
                },
                false, row.overlapped, &dm);
            d2h.push_back(kv / (ms * 1e6));
            if (row.overlapped && decode_alone_ms > 0) slow.push_back(dm / decode_alone_ms);
            ms = timed_copy(
                [&](CopyQueue& q) {
                  enqueue_copy(slot(0), host_of(1 % tenants), kv, chunk, cudaMemcpyHostToDevice, s_d2h, &q);
                },
                false, row.overlapped, &dm);
            h2d.push_back(kv / (ms * 1e6));
            ms = timed_copy(
                [&](CopyQueue& q) {
                  enqueue_copy(host_of(0), slot(0), kv, chunk, cudaMemcpyDeviceToHost, s_d2h, &q);
                  enqueue_copy(slot(resident), host_of(1 % tenants), kv, chunk, cudaMemcpyHostToDevice, s_h2d,
                               &q);
                },
                true, row.overlapped, &dm);
            bidir.push_back(2.0 * kv / (ms * 1e6));
          }
          row.d2h_gbps = median_ci(d2h);
          row.h2d_gbps = median_ci(h2d);
          row.bidir_gbps = median_ci(bidir);
          if (!slow.empty()) row.decode_slowdown = median_ci(slow).median;

          // Switch latency: round-robin over the tenants; the resident tenant
          // longest in the GPU is evicted (D2H) and the next one restored (H2D)
          // into its slot, as the engine sees it (enqueue included).
          std::vector<int> slot_owner(static_cast<std::size_t>(resident));
          for (int i = 0; i < resident; ++i) slot_owner[static_cast<std::size_t>(i)] = i;
          int next = resident % tenants, victim_slot = 0;
          std::vector<double> sw;
          for (int k = 0; k < s.switches; ++k) {
            if (row.overlapped) launch_decode(s_decode);
            const int victim = slot_owner[static_cast<std::size_t>(victim_slot)];
            cudaEventRecord(e0, s_d2h);
            enqueue_copy(host_of(victim), slot(victim_slot), kv, chunk, cudaMemcpyDeviceToHost, s_d2h);
            enqueue_copy(slot(victim_slot), host_of(next), kv, chunk, cudaMemcpyHostToDevice, s_d2h);
            cudaEventRecord(e1, s_d2h);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            sw.push_back(ms);
            slot_owner[static_cast<std::size_t>(victim_slot)] = next;
            victim_slot = (victim_slot + 1) % resident;
            next = (next + 1) % tenants;
            if (tenants <= resident) next = victim;  // every tenant fits: swap the same two back and forth
          }
          cudaStreamSynchronize(s_decode);
          row.switch_ms = summarize_latencies(sw);
          // Traced pass: each copy pattern once more, and two switches, with
          // CUPTI recording; not in the statistics.
          if (s.cupti) {
            cupti.resume();
            double dm = 0;
            timed_copy(
                [&](CopyQueue& q) {
                  enqueue_copy(host_of(0), slot(0), kv, chunk, cudaMemcpyDeviceToHost, s_d2h, &q);
                },
                false, row.overlapped, &dm);
            timed_copy(
                [&](CopyQueue& q) {
                  enqueue_copy(host_of(0), slot(0), kv, chunk, cudaMemcpyDeviceToHost, s_d2h, &q);
                  enqueue_copy(slot(resident), host_of(1 % tenants), kv, chunk, cudaMemcpyHostToDevice, s_h2d,
                               &q);
                },
                true, row.overlapped, &dm);
            for (int k = 0; k < std::min(2, s.switches); ++k) {
              if (row.overlapped) launch_decode(s_decode);
              enqueue_copy(host_of(0), slot(0), kv, chunk, cudaMemcpyDeviceToHost, s_d2h);
              enqueue_copy(slot(0), host_of(1 % tenants), kv, chunk, cudaMemcpyHostToDevice, s_d2h);
            }
            cudaDeviceSynchronize();
            cupti.pause();
          }
          if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) row.skipped = cuda_error(e);
          r.rows.push_back(row);
        }
  flag_small_transfer_collapse(r.rows);
  for (const auto& row : r.rows)
    if (row.small_transfer_collapse)
      r.findings.push_back(
          "many-small-transfers collapse: " + std::to_string(row.chunk_bytes >> 10) + " KiB copies of a " +
          std::to_string(row.kv_bytes >> 20) + " MiB cache reach " +
          std::to_string(static_cast<int>(std::min(row.d2h_gbps.median, row.h2d_gbps.median))) +
          " GB/s, under half of one whole copy");
  if (decode_alone_ms > 0)
    r.findings.push_back("decode kernel alone: " + std::to_string(decode_alone_ms) + " ms per launch");
  for (auto* e : {e0, e1, e2, d0, d1}) cudaEventDestroy(e);
  cudaFreeHost(flag);
  if (decode_buf) cudaFree(decode_buf);
  if (decode_out) cudaFree(decode_out);
  cudaStreamDestroy(s_d2h);
  cudaStreamDestroy(s_h2d);
  cudaStreamDestroy(s_decode);
  cupti.finish();
  r.nvml = sampler.stop();
  r.ran = true;
  return r;
}

}  // namespace tokenscope::probe
