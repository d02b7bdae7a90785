#pragma once
// Every `fathom <subcommand>`: each takes the arguments after the subcommand name and returns the exit code.
#include <string>
#include <vector>

namespace fathom::app {

using Args = std::vector<std::string>;

int run_logits(const Args& args);          // cmd_model.cpp
int run_generate(const Args& args);        // cmd_model.cpp
int run_bench_one_batch(const Args& args); // cmd_bench_one_batch.cpp
int run_eval(const Args& args);            // cmd_eval.cpp
int run_tokenize(const Args& args);        // cmd_tokenizer.cpp
int run_detokenize(const Args& args);      // cmd_tokenizer.cpp
int run_chat_template(const Args& args);   // cmd_chat_template.cpp
int run_serve(const Args& args);           // cmd_serve.cpp
int run_bench_serving(const Args& args);   // cmd_bench_serving.cpp

}  // namespace fathom::app
