#pragma once
// Overlap scheduling: step N executes on a worker thread while this thread prepares step N+1 (admission,
// radix-cache and KV bookkeeping, batch metadata) and then applies step N's results. A request decoding in
// both steps enters N+1 with a placeholder for the token N is sampling; the executor fills it in (so sampled
// tokens are resolved one step late). Requests that finish in N waste their slot in N+1, whose result is
// dropped. The output is the same as with SequentialStepLoop.
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "scheduler/step_loop.h"

namespace fathom::scheduler {

class OverlapStepLoop final : public StepLoop {
 public:
  // Both must outlive the loop; the executor is used from the worker thread only.
  OverlapStepLoop(Scheduler& scheduler, executor::StepExecutor& executor);
  ~OverlapStepLoop() override;  // waits for the worker to finish what it was given
  OverlapStepLoop(const OverlapStepLoop&) = delete;
  OverlapStepLoop& operator=(const OverlapStepLoop&) = delete;

  bool step() override;
  void abandon_in_flight() override;
  bool has_in_flight() const override { return in_flight_.has_value(); }

 private:
  struct Job {
    ScheduledStep step;
    std::promise<executor::StepOutput> result;
  };
  struct InFlight {
    std::shared_ptr<Job> job;
    std::future<executor::StepOutput> result;
  };

  InFlight launch(ScheduledStep step);
  void worker_loop();

  Scheduler& scheduler_;
  executor::StepExecutor& executor_;
  std::optional<InFlight> in_flight_;  // launched in the previous iteration, results not applied yet
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace fathom::scheduler
