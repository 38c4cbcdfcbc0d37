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

}  // namespace mt::dist
