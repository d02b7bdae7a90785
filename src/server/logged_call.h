#pragma once
// Runs a callback on a thread that must outlive it (the event loop, a worker): an exception escaping the callback is
// logged as "fathom: <what> failed: <reason>; <goes_on>" instead of ending the thread and the process.
#include <exception>
#include <string>

#include "core/log.h"

namespace fathom::server {

template <typename Callback>
void call_logging_exceptions(const Logger& logger, const char* what, const char* goes_on, Callback&& callback) {
  try {
    callback();
  } catch (const std::exception& error) {
    logger.error(std::string("fathom: ") + what + " failed: " + error.what() + "; " + goes_on);
  } catch (...) {
    logger.error(std::string("fathom: ") + what + " failed: an exception that is not a std::exception; " + goes_on);
  }
}

}  // namespace fathom::server
