// A small key-value store every rank can reach: rank 0 hosts it over TCP, the others connect.
// Rendezvous data goes through it (Gloo's pair addresses, NCCL's unique id, the config check).
// Every blocking call takes a timeout and, when it expires, throws an Error that names the key
// (and so the ranks) that never arrived.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mt::dist {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until the key exists (or the store's timeout passes).
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  // Atomically adds delta to an integer counter (created at 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Blocks until every key exists.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;  // non-blocking
  virtual std::chrono::milliseconds timeout() const = 0;
  // Another handle on the same store whose calls give up after `timeout` instead of the
  // store's own: a short question (who is still there?) to a store whose host may be stuck.
  virtual std::shared_ptr<Store> with_timeout(std::chrono::milliseconds timeout) const = 0;
};

// "30" or "0.3": a timeout or a wait in seconds, for the messages of the store, rendezvous and
// the process groups (tenths only when there are any).
inline std::string seconds_number(std::chrono::milliseconds ms) {
  const auto tenths = (ms.count() + 50) / 100;
  std::string text = std::to_string(tenths / 10);
  if (tenths % 10 != 0) text += '.' + std::to_string(tenths % 10);
  return text;
}

}  // namespace mt::dist
