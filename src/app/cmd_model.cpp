#include "app/commands.h"
#include "core/error.h"

namespace fathom::app {
int run_logits(const Args&) { FATHOM_FAIL("logits: model not built yet"); }
int run_generate(const Args&) { FATHOM_FAIL("generate: model not built yet"); }
}  // namespace fathom::app
