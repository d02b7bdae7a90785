#pragma once
// Shared helpers for the chat tests: paths to data and reading files.
#include <string>

#include <nlohmann/json.hpp>

namespace fathom::chat::testing {

std::string shared_data_dir();      // FATHOM_SHARED_DATA_DIR
std::string chat_test_data_dir();   // tests/chat/data in the source tree
std::string source_dir();           // repository root
std::string read_file(const std::string& path);
nlohmann::ordered_json read_json(const std::string& path);

}  // namespace fathom::chat::testing
