#include "rundir/run_json.h"

namespace tokenscope::rundir {

nlohmann::json run_json_head(const RunHead& head) {
  nlohmann::json run;
  run["tool"] = {{"name", "tokenscope"}, {"version", TOKENSCOPE_VERSION}, {"command", head.command}};
  run["clock"] = head.clock;
  run["partial"] = head.partial;
  run["tags"] = head.tags;
  run["settings"] = {{"requested", head.requested}, {"effective", head.effective}};
  run["summary"] = nullptr;
  return run;
}

nlohmann::json virtual_clock() {
  return {{"monotonic_ns", 0},
          {"unix_ns", nullptr},
          {"virtual", true},
          {"definition", "virtual time from 0: no wall-clock anchor"}};
}

}  // namespace tokenscope::rundir
