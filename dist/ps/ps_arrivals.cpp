#include "dist/ps/ps_arrivals.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "dist/ps/ps_protocol.h"

namespace mt::dist {

// Shared with the threads, which may outlive the NoteArrivals after a failure.
struct NoteArrivals::State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<int64_t>> arrived;
  std::vector<std::pair<int, std::string>> failures;
  std::vector<bool> finished;  // per worker thread
};

NoteArrivals::NoteArrivals(ProcessGroup& world, int workers, size_t per_worker, std::chrono::milliseconds backstop)
    : state_(std::make_shared<State>()), backstop_(backstop) {
  state_->finished.assign(static_cast<size_t>(workers), false);
  // Every receive is posted before any thread starts; a worker whose connection already broke
  // is a failure for next() to report.
  std::vector<std::vector<std::pair<core::Tensor, std::shared_ptr<Work>>>> posted(static_cast<size_t>(workers));
  for (int w = 0; w < workers; ++w) {
    try {
      for (size_t j = 0; j < per_worker; ++j) {
        core::Tensor note = core::Tensor::zeros({ps::kNoteNumbers}, core::DType::Int64);
        posted[static_cast<size_t>(w)].emplace_back(note, world.recv(note, w, ps::kNoteTag));
      }
    } catch (const std::exception& e) {
      state_->failures.emplace_back(w, e.what());
      posted[static_cast<size_t>(w)].clear();
    }
  }
  for (int w = 0; w < workers; ++w) {
    threads_.emplace_back([state = state_, w, posted = std::move(posted[static_cast<size_t>(w)])] {
      // `finished` is set with the last thing the thread does under the lock, so the destructor
      // joins a thread that is done or about to return, never one still waiting.
      for (size_t j = 0; j < posted.size(); ++j) {
        std::string failed;
        try {
          posted[j].second->wait();
        } catch (const std::exception& e) {
          failed = e.what();
        }
        std::lock_guard<std::mutex> lock(state->mu);
        if (failed.empty()) {
          const core::Tensor& note = posted[j].first;
          const int64_t* v = note.data<int64_t>();
          state->arrived.emplace_back(v, v + note.numel());
        } else {
          state->failures.emplace_back(w, failed);
        }
        state->finished[static_cast<size_t>(w)] = !failed.empty() || j + 1 == posted.size();
        state->cv.notify_all();
        if (!failed.empty()) return;
      }
      if (posted.empty()) {
        std::lock_guard<std::mutex> lock(state->mu);
        state->finished[static_cast<size_t>(w)] = true;
      }
    });
  }
}

NoteArrivals::~NoteArrivals() {
  for (size_t w = 0; w < threads_.size(); ++w) {
    bool finished = false;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      finished = state_->finished[w];
    }
    if (finished) {
      threads_[w].join();
    } else {
      threads_[w].detach();
    }
  }
}

std::vector<int64_t> NoteArrivals::next(const std::function<std::string(int, const std::string&)>& failure) {
  std::unique_lock<std::mutex> lock(state_->mu);
  const bool came = state_->cv.wait_for(lock, backstop_, [&] { return !state_->arrived.empty() || !state_->failures.empty(); });
  if (!state_->arrived.empty()) {
    std::vector<int64_t> a = std::move(state_->arrived.front());
    state_->arrived.pop_front();
    return a;
  }
  if (!came) {
    const std::string why = "no note within " + std::to_string(backstop_.count() / 1000) + " s";
    lock.unlock();
    MT_FAIL(failure(-1, why));
  }
  const auto [w, why] = state_->failures.front();
  lock.unlock();
  MT_FAIL(failure(w, why));
}

}  // namespace mt::dist
