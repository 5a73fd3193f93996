// CPU lists and thread affinity: the Linux CPU-list syntax ("0-3,8,10-11")
// as /sys writes it and taskset reads it, and which CPUs a thread may run on.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tokenscope {

// Parses a Linux CPU list ("0-3,8,10-11"), sorted and without repeats;
// throws InputError naming `what` and what was expected. An empty (or
// all-whitespace) list is empty.
std::vector<int> parse_cpu_list(std::string_view text, const std::string& what = "cpu list");

// A CPU list written back in the same syntax, ranges folded ("0-3,8").
std::string format_cpu_list(const std::vector<int>& cpus);

// The CPUs the calling thread may run on (empty when the kernel will not say).
std::vector<int> thread_cpus();

// Throws UsageError naming `what` for the first of cpus the calling thread
// may not run on (nothing when the kernel will not say which it may).
void check_cpus_allowed(const std::vector<int>& cpus, std::string_view what);

// Restricts the calling thread to these CPUs; false (and nothing changed)
// when the list is empty or the kernel refuses it. Threads the caller starts
// afterwards inherit the set.
bool set_thread_cpus(const std::vector<int>& cpus);

}  // namespace tokenscope
