#include "cluster/mpi_world.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "core/run_dir.h"

#ifdef TOKENSCOPE_HAVE_MPI
#include <mpi.h>
#endif

namespace tokenscope::cluster {

namespace {

[[maybe_unused]] std::int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A message's pieces: at most this many bytes (MPI counts are int).
[[maybe_unused]] constexpr std::int64_t kPiece = std::int64_t{64} << 20;

// Tags of the paired messages (collectives need none).
[[maybe_unused]] constexpr int kTagPing = 11;
[[maybe_unused]] constexpr int kTagLength = 12;
[[maybe_unused]] constexpr int kTagBytes = 13;

}  // namespace

#ifdef TOKENSCOPE_HAVE_MPI

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw std::runtime_error(
      fmt::format("MPI: {}: {}", what, std::string(text, static_cast<std::size_t>(length))));
}

// A collective's end waited for without spinning: MPI's blocking calls poll
// a core at full speed, and a rank that waits for the others (at the start,
// after its last response) would count that against the client's CPU. A
// millisecond between tests is nothing against the waits these are.
void wait_idle(MPI_Request& request, const char* what) {
  for (int done = 0;;) {
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

bool mpi_built() {
  return true;
}

MpiWorld::MpiWorld() {
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  // Errors come back as return codes (made into exceptions), not an abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw std::runtime_error("MPI: the library does not allow calls from more than the main thread");
  }
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

MpiWorld::~MpiWorld() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string MpiWorld::library() const {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string s(text, static_cast<std::size_t>(length));
  if (const auto nl = s.find_first_of("\r\n,"); nl != std::string::npos) s.resize(nl);
  return s;
}

void MpiWorld::barrier() {
  MPI_Request request;
  check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
  wait_idle(request, "MPI_Ibarrier");
}

ClockOffset MpiWorld::offset_to_root(int rounds) {
  rounds = std::max(rounds, 1);
  if (rank_ == 0) {
    // One rank at a time, so that no rank's round trips wait behind another's.
    for (int r = 1; r < size_; ++r)
      for (int k = 0; k < rounds; ++k) {
        std::int64_t ping = 0;
        check(MPI_Recv(&ping, 1, MPI_INT64_T, r, kTagPing, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
        const std::int64_t now = wall_ns();
        check(MPI_Send(&now, 1, MPI_INT64_T, r, kTagPing, MPI_COMM_WORLD), "MPI_Send");
      }
    barrier();
    return {.rounds = static_cast<std::uint32_t>(rounds)};
  }
  std::vector<PingRound> measured;
  for (int k = 0; k < rounds; ++k) {
    PingRound m;
    m.t_send_ns = wall_ns();
    check(MPI_Send(&m.t_send_ns, 1, MPI_INT64_T, 0, kTagPing, MPI_COMM_WORLD), "MPI_Send");
    check(MPI_Recv(&m.t_peer_ns, 1, MPI_INT64_T, 0, kTagPing, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
    m.t_recv_ns = wall_ns();
    // A round the wall clock was stepped back in (NTP) measures nothing:
    // left out, never thrown on (the other ranks go on to the barrier).
    if (m.t_recv_ns >= m.t_send_ns) measured.push_back(m);
  }
  barrier();
  if (measured.empty())  // every round stepped back: the offset is not known
    return {.offset_ns = 0,
            .error_ns = std::int64_t{1} << 62,
            .rtt_ns = 0,
            .rounds = static_cast<std::uint32_t>(rounds)};
  ClockOffset c = estimate_offset(measured);
  c.rounds = static_cast<std::uint32_t>(rounds);
  return c;
}

std::int64_t MpiWorld::broadcast(std::int64_t value) {
  MPI_Request request;
  check(MPI_Ibcast(&value, 1, MPI_INT64_T, 0, MPI_COMM_WORLD, &request), "MPI_Ibcast");
  wait_idle(request, "MPI_Ibcast");
  return value;
}

std::string MpiWorld::broadcast(const std::string& value) {
  const auto length = broadcast(static_cast<std::int64_t>(value.size()));
  if (length < 0 || length > kPiece) throw std::runtime_error("MPI: a broadcast text over 64 MiB");
  std::string out = rank_ == 0 ? value : std::string(static_cast<std::size_t>(length), '\0');
  MPI_Request request;
  check(MPI_Ibcast(out.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD, &request),
        "MPI_Ibcast");
  wait_idle(request, "MPI_Ibcast");
  return out;
}

std::vector<std::int64_t> MpiWorld::gather(std::int64_t value) {
  std::vector<std::int64_t> all(rank_ == 0 ? static_cast<std::size_t>(size_) : 0);
  MPI_Request request;
  check(MPI_Igather(&value, 1, MPI_INT64_T, rank_ == 0 ? all.data() : nullptr, 1, MPI_INT64_T, 0,
                    MPI_COMM_WORLD, &request),
        "MPI_Igather");
  wait_idle(request, "MPI_Igather");
  return all;
}

void MpiWorld::send(int to, std::string_view bytes) {
  const auto length = static_cast<std::int64_t>(bytes.size());
  check(MPI_Send(&length, 1, MPI_INT64_T, to, kTagLength, MPI_COMM_WORLD), "MPI_Send");
  for (std::int64_t at = 0; at < length; at += kPiece) {
    const auto n = static_cast<int>(std::min(kPiece, length - at));
    check(MPI_Send(bytes.data() + at, n, MPI_BYTE, to, kTagBytes, MPI_COMM_WORLD), "MPI_Send");
  }
}

std::string MpiWorld::receive(int from) {
  std::int64_t length = 0;
  check(MPI_Recv(&length, 1, MPI_INT64_T, from, kTagLength, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  if (length < 0) throw std::runtime_error(fmt::format("MPI: rank {} announced a negative length", from));
  std::string out;
  for (std::int64_t at = 0; at < length; at += kPiece) {
    const auto n = static_cast<int>(std::min(kPiece, length - at));
    out.resize(static_cast<std::size_t>(at + n));
    check(MPI_Recv(out.data() + at, n, MPI_BYTE, from, kTagBytes, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
          "MPI_Recv");
  }
  return out;
}

void MpiWorld::send_file(int to, const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::error_code ec;
  const auto size = in ? std::filesystem::file_size(file, ec) : 0;
  // A file that cannot be read is sent as length -1: the receiver says so
  // (the pairing of messages stays intact).
  const std::int64_t length = (!in || ec) ? -1 : static_cast<std::int64_t>(size);
  check(MPI_Send(&length, 1, MPI_INT64_T, to, kTagLength, MPI_COMM_WORLD), "MPI_Send");
  std::string piece;
  for (std::int64_t at = 0; at < length; at += kPiece) {
    const auto n = std::min(kPiece, length - at);
    piece.assign(static_cast<std::size_t>(n), '\0');
    in.read(piece.data(), n);
    // A file that shrank while it was sent: zeros where its end was (the
    // receiver's line reader then names the bad line); the count is kept.
    check(MPI_Send(piece.data(), static_cast<int>(n), MPI_BYTE, to, kTagBytes, MPI_COMM_WORLD), "MPI_Send");
  }
}

void MpiWorld::receive_file(int from, const std::filesystem::path& to) {
  std::int64_t length = 0;
  check(MPI_Recv(&length, 1, MPI_INT64_T, from, kTagLength, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  if (length < 0)
    throw IoError(fmt::format("rank {} could not read the file it was to send as {}", from, to.string()));
  // A temporary of its own beside `to` (never through a planted link),
  // renamed into place when whole.
  std::optional<TempFile> part;
  std::string problem;
  try {
    part = create_temp_beside(to);
  } catch (const IoError& e) {
    problem = e.what();
  }
  std::string piece;
  for (std::int64_t at = 0; at < length; at += kPiece) {
    const auto n = std::min(kPiece, length - at);
    piece.resize(static_cast<std::size_t>(n));
    // Every piece is received, even after a write failed, to keep the pairing.
    check(MPI_Recv(piece.data(), static_cast<int>(n), MPI_BYTE, from, kTagBytes, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
    for (std::size_t done = 0; part && problem.empty() && done < piece.size();) {
      const ssize_t w = ::write(part->fd, piece.data() + done, piece.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        problem = fmt::format("{}: cannot write rank {}'s file: {}", part->path.string(), from,
                              std::strerror(errno));
        break;
      }
      done += static_cast<std::size_t>(w);
    }
  }
  if (part) {
    if (::close(part->fd) != 0 && problem.empty())
      problem =
          fmt::format("{}: cannot write rank {}'s file: {}", part->path.string(), from, std::strerror(errno));
    std::error_code ec;
    if (problem.empty()) {
      std::filesystem::rename(part->path, to, ec);
      if (ec) problem = fmt::format("{}: cannot rename into place: {}", to.string(), ec.message());
    }
    if (!problem.empty()) std::filesystem::remove(part->path, ec);
  }
  if (!problem.empty()) throw IoError(problem);
}

#else  // no MPI in this build

bool mpi_built() {
  return false;
}

MpiWorld::MpiWorld() {
  throw UsageError(
      "--mpi: this tokenscope was built without Open MPI (install libopenmpi-dev and openmpi-bin and build "
      "again; scripts/setup.sh does); --shard env reads OMPI_COMM_WORLD_RANK without it, with tokenscope "
      "merge afterwards");
}
MpiWorld::~MpiWorld() = default;
std::string MpiWorld::library() const {
  return "";
}
void MpiWorld::barrier() {}
ClockOffset MpiWorld::offset_to_root(int) {
  return {};
}
std::int64_t MpiWorld::broadcast(std::int64_t value) {
  return value;
}
std::string MpiWorld::broadcast(const std::string& value) {
  return value;
}
std::vector<std::int64_t> MpiWorld::gather(std::int64_t value) {
  return {value};
}
void MpiWorld::send(int, std::string_view) {}
std::string MpiWorld::receive(int) {
  return {};
}
void MpiWorld::send_file(int, const std::filesystem::path&) {}
void MpiWorld::receive_file(int, const std::filesystem::path&) {}

#endif

}  // namespace tokenscope::cluster
