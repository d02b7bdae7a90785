#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fathom::model {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format caps headers at 100 MB

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json& info, uint64_t data_bytes) {
  FATHOM_CHECK(info.is_object(), path << ": tensor '" << name << "': header entry is not an object");
  SafetensorsEntry entry;
  entry.name = name;
  FATHOM_CHECK(info.contains("dtype") && info["dtype"].is_string(), path << ": tensor '" << name << "': missing dtype");
  std::string dtype = info["dtype"].get<std::string>();
  FATHOM_CHECK(dtype_from_name(dtype, &entry.dtype), path << ": tensor '" << name << "': unsupported dtype " << dtype);
  FATHOM_CHECK(info.contains("shape") && info["shape"].is_array(), path << ": tensor '" << name << "': missing shape");
  uint64_t count = 1;
  for (const json& extent : info["shape"]) {
    FATHOM_CHECK(extent.is_number_integer() && extent.get<int64_t>() >= 0,
                 path << ": tensor '" << name << "': bad shape " << info["shape"].dump());
    entry.shape.push_back(extent.get<int64_t>());
    count *= static_cast<uint64_t>(extent.get<int64_t>());
  }
  const json& offsets = info.value("data_offsets", json());
  FATHOM_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
               path << ": tensor '" << name << "': bad data_offsets");
  entry.data_begin = offsets[0].get<uint64_t>();
  entry.data_end = offsets[1].get<uint64_t>();
  FATHOM_CHECK(entry.data_begin <= entry.data_end && entry.data_end <= data_bytes,
               path << ": tensor '" << name << "': data_offsets [" << entry.data_begin << ", " << entry.data_end
                    << ") out of range (data section has " << data_bytes << " bytes; file truncated?)");
  uint64_t expected_bytes = count * dtype_size_bytes(entry.dtype);
  FATHOM_CHECK(entry.data_end - entry.data_begin == expected_bytes,
               path << ": tensor '" << name << "': " << (entry.data_end - entry.data_begin) << " bytes for shape "
                    << shape_to_string(entry.shape) << " of " << dtype << " (expected " << expected_bytes << ")");
  return entry;
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  FATHOM_CHECK(fd >= 0, path << ": cannot open (" << std::strerror(errno) << ")");
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    FATHOM_FAIL(path << ": cannot stat");
  }
  size_t file_bytes = static_cast<size_t>(info.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    FATHOM_FAIL(path << ": truncated file (" << file_bytes << " bytes, no header)");
  }
  void* mapping = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  FATHOM_CHECK(mapping != MAP_FAILED, path << ": mmap failed (" << std::strerror(errno) << ")");

  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = mapping;
  file->mapping_bytes_ = file_bytes;
  file->self_ = file;

  const uint8_t* bytes = static_cast<const uint8_t*>(mapping);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes, 8);  // little-endian u64
  FATHOM_CHECK(header_bytes <= kMaxHeaderBytes && header_bytes <= file_bytes - 8,
               path << ": header length " << header_bytes << " exceeds the file (" << file_bytes << " bytes; truncated?)");
  std::string header_text(reinterpret_cast<const char*>(bytes + 8), header_bytes);
  json header = json::parse(header_text, nullptr, /*allow_exceptions=*/false);
  FATHOM_CHECK(!header.is_discarded() && header.is_object(), path << ": header is not a valid JSON object");
  uint64_t data_bytes = file_bytes - 8 - header_bytes;
  file->data_section_ = bytes + 8 + header_bytes;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    file->entries_.emplace(it.key(), parse_entry(path, it.key(), *it, data_bytes));
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) ::munmap(mapping_, mapping_bytes_);
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  auto it = entries_.find(name);
  FATHOM_CHECK(it != entries_.end(), path_ << ": no tensor '" << name << "'");
  auto owner = self_.lock();
  void* data = const_cast<uint8_t*>(data_section_ + it->second.data_begin);
  return Tensor(it->second.dtype, it->second.shape, data, std::static_pointer_cast<void>(owner));
}

Checkpoint Checkpoint::open(const std::string& model_dir) {
  namespace fs = std::filesystem;
  Checkpoint checkpoint;
  fs::path index_path = fs::path(model_dir) / "model.safetensors.index.json";
  std::vector<std::string> shard_names;
  json weight_map;
  if (fs::exists(index_path)) {
    std::ifstream stream(index_path);
    std::stringstream text;
    text << stream.rdbuf();
    json index = json::parse(text.str(), nullptr, false);
    FATHOM_CHECK(!index.is_discarded() && index.is_object(), index_path.string() << ": not valid JSON");
    FATHOM_CHECK(index.contains("weight_map") && index["weight_map"].is_object(),
                 index_path.string() << ": missing 'weight_map' object");
    weight_map = index["weight_map"];
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      FATHOM_CHECK(it->is_string(), index_path.string() << ": weight_map['" << it.key() << "'] is not a file name");
      shard_names.push_back(it->get<std::string>());
    }
    std::sort(shard_names.begin(), shard_names.end());
    shard_names.erase(std::unique(shard_names.begin(), shard_names.end()), shard_names.end());
  } else {
    FATHOM_CHECK(fs::is_directory(model_dir), model_dir << ": not a directory");
    for (const auto& item : fs::directory_iterator(model_dir)) {
      if (item.path().extension() == ".safetensors") shard_names.push_back(item.path().filename().string());
    }
    std::sort(shard_names.begin(), shard_names.end());
    FATHOM_CHECK(!shard_names.empty(), model_dir << ": no *.safetensors files and no model.safetensors.index.json");
  }
  for (const std::string& shard : shard_names) {
    std::string path = (fs::path(model_dir) / shard).string();
    FATHOM_CHECK(fs::exists(path), index_path.string() << " lists shard " << shard << " which does not exist");
    checkpoint.files_.push_back(SafetensorsFile::open(path));
    size_t file_index = checkpoint.files_.size() - 1;
    for (const auto& [name, entry] : checkpoint.files_.back()->entries()) {
      auto [it, inserted] = checkpoint.locations_.emplace(name, file_index);
      FATHOM_CHECK(inserted, "tensor '" << name << "' appears in both " << checkpoint.files_[it->second]->path()
                                        << " and " << path);
    }
  }
  if (!weight_map.is_null()) {
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      auto location = checkpoint.locations_.find(it.key());
      FATHOM_CHECK(location != checkpoint.locations_.end(),
                   index_path.string() << ": tensor '" << it.key() << "' is not in " << it->get<std::string>());
      FATHOM_CHECK(fs::path(checkpoint.files_[location->second]->path()).filename() == it->get<std::string>(),
                   index_path.string() << ": tensor '" << it.key() << "' is listed in " << it->get<std::string>()
                                       << " but found in " << checkpoint.files_[location->second]->path());
    }
  }
  return checkpoint;
}

const SafetensorsEntry& Checkpoint::entry(const std::string& name) const {
  auto it = locations_.find(name);
  FATHOM_CHECK(it != locations_.end(), "checkpoint has no tensor '" << name << "'");
  return files_[it->second]->entries().at(name);
}

const std::string& Checkpoint::file_of(const std::string& name) const {
  auto it = locations_.find(name);
  FATHOM_CHECK(it != locations_.end(), "checkpoint has no tensor '" << name << "'");
  return files_[it->second]->path();
}

Tensor Checkpoint::tensor(const std::string& name) const {
  auto it = locations_.find(name);
  FATHOM_CHECK(it != locations_.end(), "checkpoint has no tensor '" << name << "'");
  return files_[it->second]->tensor(name);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> result;
  for (const auto& [name, index] : locations_) result.push_back(name);
  return result;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    header[name] = {{"dtype", std::string(dtype_name(tensor.dtype()))},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  std::ofstream out(path, std::ios::binary);
  FATHOM_CHECK(out.good(), "cannot write " << path);
  uint64_t header_bytes = header_text.size();
  out.write(reinterpret_cast<const char*>(&header_bytes), 8);
  out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
  // nlohmann orders object keys alphabetically, so write payloads in the offsets' order (insertion order).
  for (const auto& [name, tensor] : tensors) {
    out.write(static_cast<const char*>(tensor.raw()), static_cast<std::streamsize>(tensor.nbytes()));
  }
  FATHOM_CHECK(out.good(), "failed writing " << path);
}

}  // namespace fathom::model
