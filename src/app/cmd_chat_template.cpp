// Placeholder until the chat-template library lands; replaced by the chat-template work.
#include "app/commands.h"
#include "core/error.h"

namespace fathom::app {
int run_chat_template(const Args&) { FATHOM_FAIL("chat-template is not built yet"); }
}  // namespace fathom::app
