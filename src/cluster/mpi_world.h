// Open MPI under bench --mpi (docs/fleet.md "Under Open MPI"): the ranks of
// one mpirun, and the few collective steps a sharded bench needs from them.
// Built with MPI when CMake finds it (Debian libopenmpi-dev; the macro
// TOKENSCOPE_HAVE_MPI); without it, constructing a world throws UsageError.
//
// Every call here is collective or paired (a send on one rank, its receive
// on another), made from the thread that constructed the world, in the
// same order on every rank; the caller keeps that order even when its own
// run failed (bench --mpi goes through every step on every rank).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/clock_offset.h"

namespace tokenscope::cluster {

// Whether this build has Open MPI.
bool mpi_built();

class MpiWorld {
 public:
  // MPI_Init_thread (serialized calls). Throws UsageError when the build has
  // no MPI, RuntimeError when MPI does not start.
  MpiWorld();
  ~MpiWorld();  // MPI_Finalize
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The MPI library's version line.
  std::string library() const;

  void barrier();
  // Collective: on rank r, rank 0's wall clock (system_clock) against this
  // rank's, from `rounds` ping-pongs with rank 0 (rank 0, one rank at a
  // time, answers each with its clock); rank 0 gets a zero offset.
  ClockOffset offset_to_root(int rounds = 32);
  // Collective: rank 0's value on every rank.
  std::int64_t broadcast(std::int64_t value);
  std::string broadcast(const std::string& value);
  // Collective: on rank 0 every rank's value in rank order; elsewhere empty.
  std::vector<std::int64_t> gather(std::int64_t value);

  // Paired: bytes (any length; sent in pieces of at most 64 MiB).
  void send(int to, std::string_view bytes);
  std::string receive(int from);
  // Paired: a file's bytes, streamed from disk on one side to disk on the
  // other (`to` written under a temporary name, renamed when whole).
  void send_file(int to, const std::filesystem::path& file);
  void receive_file(int from, const std::filesystem::path& to);

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace tokenscope::cluster
