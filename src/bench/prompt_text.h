// Prompt text for HTTP requests built from a workload: what a client sends
// so that the server sees the workload's tokens. Trace prompts (ShareGPT,
// native "prompt") are sent as written; synthetic and Mooncake prompts are
// token sequences of the tokenizer's invertible vocabulary, turned into text
// that tokenscope serve re-tokenizes to exactly the same ids — so prefix
// reuse in the trace (shared hash ids, shared-prefix groups) is prefix reuse
// on the server. (Other servers see plain lowercase words with the same
// sharing structure and roughly the same token counts.)
#pragma once

#include <string>

#include "workload/workload.h"

namespace tokenscope::bench {

std::string prompt_text(const workload::Workload& w, const workload::Request& r);

}  // namespace tokenscope::bench
