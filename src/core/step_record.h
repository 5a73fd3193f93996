// The step record: one line of steps.jsonl (sim --out; docs/metrics.md
// "steps.jsonl"), what one engine step did and the engine's state after it.
// Times are ns of virtual time. Written by the simulator's recording
// observer (engine/simulator.h), read back by analyze (run_data.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/clock.h"

namespace tokenscope {

struct StepRecord {
  std::uint64_t index = 0;
  Nanos t = 0;             // the step's start
  Nanos dur = 0;           // its duration
  std::uint32_t seqs = 0;  // sequences in the batch
  std::uint32_t prefill_tokens = 0;
  std::uint32_t decode_tokens = 0;
  std::uint32_t running = 0;  // after the step
  std::uint32_t waiting = 0;  // after the step (swapped included)
  double kv_usage = 0.0;      // 0..1 after scheduling; written with 6 decimals
  std::uint32_t kv_blocks = 0;
  std::uint64_t query_tokens = 0;  // prefix-cache lookups in this step, tokens
  std::uint64_t hit_tokens = 0;    // of those, found
  std::uint32_t preemptions = 0;
  std::uint32_t tenant_switches = 0;
  std::uint64_t swap_out_bytes = 0;
  std::uint64_t swap_in_bytes = 0;
  std::uint64_t host_kv_blocks = 0;  // held in the host pool after the step
  std::uint32_t host_kv_evictions = 0;
  std::uint32_t host_kv_recomputed_blocks = 0;
  // Runs with perturbations: of dur, the time they added, and of that the
  // stolen time (written only when has_perturbations).
  bool has_perturbations = false;
  Nanos perturbation_ns = 0;
  Nanos stolen_ns = 0;

  // Appends the line (no newline) to out.
  void append_json(std::string& out) const;
};

}  // namespace tokenscope
