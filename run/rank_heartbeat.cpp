#include "run/rank_heartbeat.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>

namespace zeroplan {

namespace {

// Datagrams are read into a buffer of this size; a longer message is cut to fit.
constexpr std::size_t kMaxDatagram = 4096;

// "@name" -> the abstract-namespace address (a leading NUL, no terminator); false when the text is not one.
bool abstract_address(const std::string& text, sockaddr_un& address, socklen_t& length) {
  if (text.size() < 2 || text[0] != '@' || text.size() - 1 > sizeof address.sun_path - 1) return false;
  std::memset(&address, 0, sizeof address);
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, text.data() + 1, text.size() - 1);
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + text.size());
  return true;
}

// Tabs and line ends would split the fields; a message stays one line.
std::string one_field(const std::string& text) {
  std::string out = text;
  for (char& c : out)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return out;
}

std::vector<std::string> split_tabs(const std::string& text) {
  std::vector<std::string> fields;
  std::size_t at = 0;
  for (;;) {
    const std::size_t tab = text.find('\t', at);
    fields.push_back(text.substr(at, tab == std::string::npos ? std::string::npos : tab - at));
    if (tab == std::string::npos) return fields;
    at = tab + 1;
  }
}

bool parse_int(const std::string& text, long long& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  value = std::strtoll(text.c_str(), &end, 10);
  return errno == 0 && *end == '\0';
}

}  // namespace

std::string encode(const HeartbeatMessage& m) {
  std::ostringstream out;
  out.precision(3);
  out << std::fixed;
  auto where = [&] {
    out << '\t' << m.step << '\t' << one_field(m.phase) << '\t' << m.collectives << '\t' << one_field(m.collective)
        << '\t' << m.ordinal << '\t' << m.seconds_in_state;
  };
  switch (m.type) {
    case HeartbeatMessage::Type::beat:
      out << "beat\t" << m.rank << '\t' << m.pid;
      where();
      break;
    case HeartbeatMessage::Type::fail:
      out << "fail\t" << m.rank << '\t' << m.pid;
      where();
      out << '\t' << one_field(m.kind) << '\t' << one_field(m.message);
      break;
    case HeartbeatMessage::Type::done:
      out << "done\t" << m.rank << '\t' << m.pid << '\t' << m.exit_status;
      break;
  }
  std::string text = out.str();
  if (text.size() > kMaxDatagram) text.resize(kMaxDatagram);
  return text;
}

std::optional<HeartbeatMessage> decode(const std::string& datagram) {
  const std::vector<std::string> f = split_tabs(datagram);
  if (f.size() < 3) return std::nullopt;
  HeartbeatMessage m;
  long long rank = 0, pid = 0;
  if (!parse_int(f[1], rank) || !parse_int(f[2], pid) || rank < 0 || pid <= 0) return std::nullopt;
  m.rank = static_cast<int>(rank);
  m.pid = static_cast<pid_t>(pid);
  auto where = [&]() -> bool {
    long long step = 0, collectives = 0, ordinal = 0;
    if (!parse_int(f[3], step) || !parse_int(f[5], collectives) || !parse_int(f[7], ordinal)) return false;
    m.step = step;
    m.phase = f[4];
    m.collectives = collectives;
    m.collective = f[6];
    m.ordinal = ordinal;
    char* end = nullptr;
    m.seconds_in_state = std::strtod(f[8].c_str(), &end);
    return *end == '\0';
  };
  if (f[0] == "beat" && f.size() == 9) {
    m.type = HeartbeatMessage::Type::beat;
    return where() ? std::optional<HeartbeatMessage>(m) : std::nullopt;
  }
  if (f[0] == "fail" && f.size() == 11) {
    m.type = HeartbeatMessage::Type::fail;
    m.kind = f[9];
    m.message = f[10];
    return where() ? std::optional<HeartbeatMessage>(m) : std::nullopt;
  }
  if (f[0] == "done" && f.size() == 4) {
    long long status = 0;
    if (!parse_int(f[3], status)) return std::nullopt;
    m.type = HeartbeatMessage::Type::done;
    m.exit_status = static_cast<int>(status);
    return m;
  }
  return std::nullopt;
}

std::string describe(const HeartbeatMessage& beat) {
  exec::RankProgress::Snapshot s;
  s.step = beat.step;
  s.phase = beat.phase.c_str();
  s.collective = beat.collective.empty() ? nullptr : beat.collective.c_str();
  s.ordinal = beat.ordinal;
  s.collectives = beat.collectives;
  s.seconds_in_state = beat.seconds_in_state;
  return exec::describe(s);
}

HeartbeatSender::HeartbeatSender(int rank, const exec::RankProgress& progress) : rank_(rank), progress_(progress) {
  const char* address = std::getenv(kHeartbeatVariable);
  sockaddr_un target{};
  socklen_t length = 0;
  if (!address || !abstract_address(address, target, length)) return;
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return;  // no heartbeats: the launcher then sees this rank as silent and says so
  // connect() fixes the destination, so send() needs no address and a vanished launcher fails fast.
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&target), length) != 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  send({});  // the first beat at once: the launcher learns this rank's pid
  beating_ = std::make_unique<exec::WatchdogThread>(
      std::chrono::milliseconds(static_cast<long long>(kHeartbeatPeriodS * 1000)), [this] { send({}); });
}

HeartbeatSender::~HeartbeatSender() {
  beating_.reset();
  if (fd_ >= 0) ::close(fd_);
}

void HeartbeatSender::beat() { send({}); }

void HeartbeatSender::fail(const std::string& kind, const std::string& message) {
  HeartbeatMessage m;
  m.type = HeartbeatMessage::Type::fail;
  m.kind = kind;
  m.message = message;
  send(m);
}

void HeartbeatSender::done(int exit_status) {
  HeartbeatMessage m;
  m.type = HeartbeatMessage::Type::done;
  m.exit_status = exit_status;
  beating_.reset();  // nothing after the goodbye
  send(m);
}

void HeartbeatSender::send(const HeartbeatMessage& given) {
  if (fd_ < 0) return;
  HeartbeatMessage m = given;
  m.rank = rank_;
  m.pid = ::getpid();
  if (m.type != HeartbeatMessage::Type::done) {
    const exec::RankProgress::Snapshot s = progress_.snapshot();
    m.step = s.step;
    m.phase = s.phase;
    m.collectives = s.collectives;
    m.collective = s.collective ? s.collective : "";
    m.ordinal = s.ordinal;
    m.seconds_in_state = s.seconds_in_state;
  }
  const std::string text = encode(m);
  // Never blocks the rank: a full or vanished launcher socket loses the message, which the launcher's deadlines
  // account for.
  (void)::send(fd_, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

HeartbeatListener::HeartbeatListener() {
  std::random_device random;
  char name[96];
  std::snprintf(name, sizeof name, "@zeroplan-heartbeat-%ld-%08x%08x", static_cast<long>(::getpid()), random(), random());
  address_ = name;
  sockaddr_un address{};
  socklen_t length = 0;
  abstract_address(address_, address, length);
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) throw std::runtime_error(std::string("heartbeat socket: socket: ") + std::strerror(errno));
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    const int error = errno;
    ::close(fd_);
    throw std::runtime_error("heartbeat socket: bind " + address_ + ": " + std::strerror(error));
  }
}

HeartbeatListener::~HeartbeatListener() { ::close(fd_); }

std::vector<HeartbeatMessage> HeartbeatListener::receive() {
  std::vector<HeartbeatMessage> messages;
  char buffer[kMaxDatagram + 1];
  for (;;) {
    const ssize_t n = ::recv(fd_, buffer, kMaxDatagram, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return messages;  // EAGAIN: nothing more now
    if (auto m = decode(std::string(buffer, static_cast<std::size_t>(n)))) messages.push_back(std::move(*m));
  }
}

}  // namespace zeroplan
