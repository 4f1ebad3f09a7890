#include "exec/offload/swap_buffer_policy.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace zeroplan::exec::offload {

SwapBufferPolicy::SwapBufferPolicy(int buffers) {
  if (buffers < 1) throw std::invalid_argument("SwapBufferPolicy: " + std::to_string(buffers) + " buffers; expected at least 1");
  slots_.resize(static_cast<std::size_t>(buffers));
}

int SwapBufferPolicy::free_holding(int chunk) const {
  for (std::size_t b = 0; b < slots_.size(); ++b)
    if (!slots_[b].busy && slots_[b].current && slots_[b].chunk == chunk) return static_cast<int>(b);
  return -1;
}

int SwapBufferPolicy::victim() const {
  // Classes: 0 holds nothing current, 1 holds a chunk the plan does not ask for again, 2 one it does (the furthest
  // next use taken); within a class the least recently released.
  int best = -1, best_class = 3;
  std::size_t best_next = 0;
  for (std::size_t b = 0; b < slots_.size(); ++b) {
    const Slot& s = slots_[b];
    if (s.busy) continue;
    int cls = 0;
    std::size_t next = 0;
    if (s.current) {
      cls = 1;
      for (std::size_t p = next_reserve_; p < order_.size(); ++p)
        if (order_[p] == s.chunk) {
          cls = 2;
          next = p;
          break;
        }
    }
    bool better = best < 0 || cls < best_class;
    if (!better && cls == best_class)
      better = cls == 2 ? (next > best_next || (next == best_next && s.released_at < slots_[best].released_at))
                        : s.released_at < slots_[best].released_at;
    if (better) {
      best = static_cast<int>(b);
      best_class = cls;
      best_next = next;
    }
  }
  return best;
}

void SwapBufferPolicy::reserve(std::size_t position, int buffer, bool read) {
  Slot& s = slots_[static_cast<std::size_t>(buffer)];
  s.chunk = order_[position];
  s.current = true;  // once its read lands; nothing uses it before acquire()
  s.busy = true;
  order_buffer_[position] = buffer;
  order_read_[position] = read ? 1 : 0;
}

void SwapBufferPolicy::top_up(std::vector<Reservation>& reserved) {
  while (next_reserve_ < order_.size() && next_reserve_ < next_use_ + static_cast<std::size_t>(ahead_)) {
    const std::size_t p = next_reserve_;
    int b = free_holding(order_[p]);
    const bool read = b < 0;
    if (read) b = victim();
    if (b < 0) return;
    ++next_reserve_;  // before reserve: the victim rule looked past this position already
    reserve(p, b, read);
    reserved.push_back(Reservation{p, b, read});
  }
}

void SwapBufferPolicy::drop_plan(std::vector<int>& dropped) {
  for (std::size_t p = next_use_; p < next_reserve_; ++p) {
    Slot& s = slots_[static_cast<std::size_t>(order_buffer_[p])];
    s.busy = false;
    // A hit's values stay current; a read's may not have landed (it is finished, but counts as not current, so
    // that the policy does not depend on when it did).
    if (order_read_[p]) s.current = false;
    s.released_at = ++releases_;
    dropped.push_back(order_buffer_[p]);
  }
  order_.clear();
  order_buffer_.clear();
  order_read_.clear();
  next_use_ = next_reserve_ = 0;
}

void SwapBufferPolicy::plan(const std::vector<int>& order, int ahead, std::vector<int>& dropped) {
  drop_plan(dropped);
  order_ = order;
  order_buffer_.assign(order_.size(), -1);
  order_read_.assign(order_.size(), 0);
  ahead_ = std::max(0, std::min(ahead, buffers()));
}

SwapBufferPolicy::Use SwapBufferPolicy::acquire(int chunk, std::vector<int>& dropped) {
  if (next_use_ < order_.size() && order_[next_use_] == chunk) {
    bool now = false;
    if (next_reserve_ == next_use_) {  // not reserved ahead (no buffer was free, or ahead 0): now
      int b = free_holding(chunk);
      const bool read = b < 0;
      if (read) b = victim();
      if (b < 0) throw std::logic_error("SwapBufferPolicy: every buffer is in use; release one first");
      ++next_reserve_;
      reserve(next_use_, b, read);
      now = true;
    }
    const std::size_t p = next_use_++;
    return Use{order_buffer_[p], order_read_[p] != 0, true, now, p};
  }
  drop_plan(dropped);  // the plan no longer says what comes next
  int b = free_holding(chunk);
  const bool read = b < 0;
  if (read) b = victim();
  if (b < 0) throw std::logic_error("SwapBufferPolicy: every buffer is in use; release one first");
  Slot& s = slots_[static_cast<std::size_t>(b)];
  s.chunk = chunk;
  s.current = true;
  s.busy = true;
  return Use{b, read, false, true, 0};
}

void SwapBufferPolicy::release(int buffer) {
  Slot& s = slots_.at(static_cast<std::size_t>(buffer));
  s.busy = false;
  s.released_at = ++releases_;
}

void SwapBufferPolicy::forget(int chunk) {
  for (Slot& s : slots_)
    if (!s.busy && s.chunk == chunk) s.current = false;
}

int SwapBufferPolicy::begin_write(int chunk, bool whole, std::vector<int>& dropped) {
  for (std::size_t p = next_use_; p < next_reserve_; ++p)
    if (order_[p] == chunk) {  // a planned read of it would race the write
      drop_plan(dropped);
      break;
    }
  // A free buffer with the chunk's (now old) values takes the new ones: the other buffers keep theirs.
  int b = -1;
  for (std::size_t i = 0; i < slots_.size() && b < 0; ++i)
    if (!slots_[i].busy && slots_[i].chunk == chunk) b = static_cast<int>(i);
  forget(chunk);
  if (b < 0) b = victim();
  if (b < 0) throw std::logic_error("SwapBufferPolicy: every buffer is in use; release one first");
  Slot& s = slots_[static_cast<std::size_t>(b)];
  s.chunk = chunk;
  s.current = false;
  s.busy = true;
  s.whole_write = whole;
  return b;
}

void SwapBufferPolicy::end_write(int buffer) {
  Slot& s = slots_.at(static_cast<std::size_t>(buffer));
  s.busy = false;
  s.current = s.whole_write;
  s.released_at = ++releases_;
}

}  // namespace zeroplan::exec::offload
