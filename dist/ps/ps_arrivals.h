// The parameter server's arrival order (ps_server.h): the notes a server receives in one
// iteration, in the order they come. Every worker sends a note right after each push
// (ps_protocol.h); each worker's notes are received on its own connection, posted in advance so
// that Gloo sends them at once, and one thread per worker waits for them in the order that
// worker sent them and queues them. next() takes them from the queue in the order they came.
// A worker whose connection breaks or stays silent past the world's timeout is reported by
// next() once the notes that came before are taken.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/comm/process_group.h"

namespace mt::dist {

class NoteArrivals {
 public:
  // Posts `per_worker` note receives from each of the workers 0..workers-1 of `world` and starts
  // the waiting threads. `backstop`: next() gives up after this at the latest (each connection's
  // own wait times out at the world's timeout first).
  NoteArrivals(ProcessGroup& world, int workers, size_t per_worker, std::chrono::milliseconds backstop);
  // Joins the threads that are done; one still waiting on a silent worker (after a failure) is
  // left to finish at the world's timeout: it owns everything it uses.
  ~NoteArrivals();

  // The next note to arrive (ps::kNoteNumbers: worker, partition, receipt wanted). On a worker's
  // failure, or nothing within the backstop, throws core::Error with the text `failure(worker,
  // why)` (worker -1: no one failed, all were silent).
  std::vector<int64_t> next(const std::function<std::string(int worker, const std::string& why)>& failure);

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::chrono::milliseconds backstop_;
  std::vector<std::thread> threads_;
};

}  // namespace mt::dist
