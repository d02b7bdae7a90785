#pragma once
// Drives the scheduler: one iteration prepares a step, executes it and applies its results. The sequential
// loop does these in order; OverlapStepLoop (overlap_step_loop.h) runs the execution on a worker thread.
#include "executor/step_executor.h"
#include "scheduler/scheduler.h"

namespace fathom::scheduler {

class StepLoop {
 public:
  virtual ~StepLoop() = default;
  // One iteration. False when nothing was scheduled and nothing was in flight. Executor errors propagate
  // (call abandon_in_flight() and Scheduler::fail_all() after one).
  virtual bool step() = 0;
  // Waits for any step still executing and drops its results.
  virtual void abandon_in_flight() {}
  virtual bool has_in_flight() const { return false; }
};

class SequentialStepLoop final : public StepLoop {
 public:
  // Both must outlive the loop.
  SequentialStepLoop(Scheduler& scheduler, executor::StepExecutor& executor);
  bool step() override;

 private:
  Scheduler& scheduler_;
  executor::StepExecutor& executor_;
};

}  // namespace fathom::scheduler
