#pragma once
// Memory-mapped safetensors files and sharded checkpoints (model.safetensors.index.json).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace fathom::model {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;  // byte offsets relative to the start of the data section
  uint64_t data_end = 0;
};

// One .safetensors file, mapped read-only; tensors are views into the mapping (no copy).
class SafetensorsFile {
 public:
  // Validates the header (JSON, dtypes, shapes vs byte ranges, ranges inside the file); throws naming file and tensor.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  Tensor tensor(const std::string& name) const;  // view; keeps the mapping alive

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const uint8_t* data_section_ = nullptr;
  std::map<std::string, SafetensorsEntry> entries_;
  std::weak_ptr<SafetensorsFile> self_;
};

// All tensors of a checkpoint directory: model.safetensors.index.json when present, else every *.safetensors file.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& model_dir);

  bool contains(const std::string& name) const { return locations_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;
  Tensor tensor(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> locations_;  // tensor name -> index into files_
};

// Writes float32/int64/any tensors to a new safetensors file (used for logits output and tests).
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace fathom::model
