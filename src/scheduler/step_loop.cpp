#include "scheduler/step_loop.h"

namespace fathom::scheduler {

SequentialStepLoop::SequentialStepLoop(Scheduler& scheduler, executor::StepExecutor& executor)
    : scheduler_(scheduler), executor_(executor) {}

bool SequentialStepLoop::step() {
  std::optional<ScheduledStep> step = scheduler_.prepare_step();
  if (!step) return false;
  const executor::StepOutput output = executor_.execute(step->batch);
  scheduler_.complete_step(*step, output);
  return true;
}

}  // namespace fathom::scheduler
