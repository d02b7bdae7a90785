#include "scheduler/overlap_step_loop.h"

namespace fathom::scheduler {

OverlapStepLoop::OverlapStepLoop(Scheduler& scheduler, executor::StepExecutor& executor)
    : scheduler_(scheduler), executor_(executor), worker_([this] { worker_loop(); }) {}

OverlapStepLoop::~OverlapStepLoop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

void OverlapStepLoop::worker_loop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything given was run
      job = queue_.front();
      queue_.pop_front();
    }
    // Drop this thread's reference before publishing, so the step (and the requests it references) is always
    // destroyed on the scheduler's thread.
    std::promise<executor::StepOutput> result = std::move(job->result);
    try {
      executor::StepOutput output = executor_.execute(job->step.batch);
      job.reset();
      result.set_value(std::move(output));
    } catch (...) {
      job.reset();
      result.set_exception(std::current_exception());
    }
  }
}

OverlapStepLoop::InFlight OverlapStepLoop::launch(ScheduledStep step) {
  auto job = std::make_shared<Job>();
  job->step = std::move(step);
  InFlight in_flight{job, job->result.get_future()};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return in_flight;
}

bool OverlapStepLoop::step() {
  // Prepare N+1 while N runs, then apply N's results.
  std::optional<ScheduledStep> next = scheduler_.prepare_step();
  std::optional<InFlight> previous = std::move(in_flight_);
  in_flight_.reset();
  if (next) in_flight_ = launch(std::move(*next));
  if (!previous) return in_flight_.has_value();
  const executor::StepOutput output = previous->result.get();
  scheduler_.complete_step(previous->job->step, output);
  return true;
}

void OverlapStepLoop::abandon_in_flight() {
  if (!in_flight_) return;
  try {
    in_flight_->result.get();
  } catch (...) {
  }
  in_flight_.reset();
}

}  // namespace fathom::scheduler
