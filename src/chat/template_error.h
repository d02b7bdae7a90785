#pragma once
// The error a chat template raises on purpose via raise_exception(message): what() is that message, unchanged,
// so a server can hand it back to the client (e.g. "Conversation roles must alternate ...").
#include <string>

#include "core/error.h"

namespace fathom::chat {

class TemplateRaisedError : public fathom::Error {
 public:
  TemplateRaisedError(std::string message, int line) : fathom::Error(std::move(message)), line_(line) {}
  int template_line() const { return line_; }

 private:
  int line_;
};

}  // namespace fathom::chat
