#include "rundir/run_session.h"

namespace tokenscope::rundir {

RunSession::RunSession(Options options) : dir_(std::move(options.dir)), cache_(std::move(options.cache)) {
  if (!dir_.empty()) files_ = std::make_unique<RunDirectory>(dir_, options.requests_line_durable);
  if (!files_) cache_.reset();
}

RunSession::~RunSession() = default;

void RunSession::start(const nlohmann::json& run) {
  if (files_) files_->write_run_json(run);
}

void RunSession::open_requests() {
  if (files_) files_->requests();
}

void RunSession::open_samples() {
  if (files_) files_->samples();
}

void RunSession::add_request(const RequestRecord& r) {
  // The line first: a record whose line could not be written (a full disk)
  // is not in the summary run.json gets.
  if (files_) {
    r.append_json(files_->requests().begin_line());
    files_->requests().end_line();
    if (cache_) cache_->add_request(r);
  }
  summary_.add(r);
}

void RunSession::add_step(const StepRecord& s) {
  if (!files_) return;
  s.append_json(files_->steps().begin_line());
  files_->steps().end_line();
  if (cache_) cache_->add_step(s);
}

void RunSession::add_observation(const observe::Observation& o) {
  if (!files_) return;
  observe::append_observation_json(files_->samples().begin_line(), o);
  files_->samples().end_line();
  if (cache_) cache_->add_observation(o);
}

void RunSession::observed(const observe::Observation& o) {
  if (cache_) cache_->add_observation(o);
}

void RunSession::flush_requests() {
  if (files_) files_->requests().flush();
}

void RunSession::add_finisher(FinisherKind kind, Finisher finisher) {
  (kind == FinisherKind::kAddsToRunJson ? adds_ : reads_).push_back(std::move(finisher));
}

void RunSession::finish(nlohmann::json& run, bool reached_end, std::ostream& log) {
  if (!files_) return;
  files_->flush();
  files_->write_run_json(run);
  files_->close();
  FinishedRun finished{dir_, run, reached_end, log};
  for (const auto& f : adds_) f(finished);
  if (finished.run_json_changed) files_->write_run_json(run);
  // The cache's key holds run.json's size and time: after its last write.
  if (cache_ && reached_end) cache_->finish(dir_);
  cache_.reset();
  for (const auto& f : reads_) f(finished);
}

void RunSession::abandon(const nlohmann::json& run) noexcept {
  cache_.reset();
  if (!files_) return;
  try {
    files_->write_run_json(run);
  } catch (const std::exception&) {
  }
}

}  // namespace tokenscope::rundir
