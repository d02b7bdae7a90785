#pragma once
// serve's periodic engine line at --log-level info (SGLang logs one per 40 decode steps; this one per interval):
// requests running and queued, KV cache use, and per second over the interval: prompt tokens submitted, prompt tokens
// the prefix cache served to admitted requests, and tokens generated.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/log.h"
#include "scheduler/engine.h"

namespace fathom::server {

// The line for an interval of interval_s seconds between two snapshots; nullopt when the engine was idle all along
// (nothing running or queued at either end, no token counted in between), so an idle server logs nothing.
std::optional<std::string> format_stats_line(const scheduler::EngineStats& before, const scheduler::EngineStats& after,
                                             double interval_s);

// A thread logging format_stats_line every interval until destroyed. The engine must outlive it.
class EngineStatsLog {
 public:
  EngineStatsLog(const scheduler::Engine& engine, const Logger& logger, std::chrono::milliseconds interval);
  ~EngineStatsLog();
  EngineStatsLog(const EngineStatsLog&) = delete;
  EngineStatsLog& operator=(const EngineStatsLog&) = delete;

 private:
  void run();

  const scheduler::Engine& engine_;
  const Logger& logger_;
  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fathom::server
