#pragma once
// OpenAI chat.completion responses and chat.completion.chunk streams. With output parsing (tools and a
// --tool-call-parser, or a --reasoning-parser) the generated text is split into `content`,
// `reasoning_content` and `tool_calls` (ids "call_<24 random alphanumerics>"); streamed, a call arrives as a
// delta with its index, id, type and name, then deltas of argument text. finish_reason is "tool_calls" when a
// choice that stopped normally made at least one call.
#include <memory>

#include "server/chat_output_parser.h"
#include "server/generation_protocol.h"
#include "server/openai_response.h"

namespace fathom::server {

// `output` null: the generated text is the content, unparsed.
std::unique_ptr<GenerationProtocol> make_chat_protocol(OpenAiResponseContext context, bool logprobs,
                                                       std::shared_ptr<const ChatOutputOptions> output = nullptr);

}  // namespace fathom::server
