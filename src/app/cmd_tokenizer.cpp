// Placeholder until the tokenizer library lands; replaced by the tokenizer work.
#include "app/commands.h"
#include "core/error.h"

namespace fathom::app {
int run_tokenize(const Args&) { FATHOM_FAIL("tokenize is not built yet"); }
int run_detokenize(const Args&) { FATHOM_FAIL("detokenize is not built yet"); }
}  // namespace fathom::app
