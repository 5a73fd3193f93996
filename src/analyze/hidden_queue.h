// The hidden queue of a run: requests the client has in flight that the
// server's running and waiting gauges do not show. llama-server counts as
// waiting only the requests its HTTP threads hold; more in flight wait
// unseen in its HTTP queue. bench (run.json server.hidden_queue), the report
// (a line beside requests in flight) and check's item 10 read it.
#pragma once

#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"

namespace tokenscope::analyze {

struct HiddenQueue {
  double mean = 0, max = 0, in_flight_max = 0;
  std::size_t samples = 0;
  std::vector<Nanos> t;       // each sample's time (within the run)
  std::vector<double> value;  // the hidden queue then
};

// At each sample of the server's running gauge (running_t, running_v)
// between the first send and the last close: the client's requests in
// flight (sent, not yet closed or ended) less the server's running and
// waiting requests (the last waiting sample at or before it; none: 0), at
// least 0. sends and closes need not be sorted; every time is on one clock.
HiddenQueue hidden_queue(std::vector<Nanos> sends, std::vector<Nanos> closes,
                         const std::vector<Nanos>& running_t, const std::vector<double>& running_v,
                         const std::vector<Nanos>& waiting_t, const std::vector<double>& waiting_v);

// {"mean", "max", "in_flight_max", "samples"}.
nlohmann::json hidden_queue_json(const HiddenQueue& h);

}  // namespace tokenscope::analyze
