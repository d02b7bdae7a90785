#include "model/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/error.h"
#include "tiny_model.h"

namespace fathom::model {
namespace {

using fathom::testing::TempDir;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  uint64_t length = header.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header;
  out << std::string(data_bytes, '\0');
}

TEST(Safetensors, RoundTripsTensors) {
  TempDir dir("st-roundtrip");
  Tensor a = Tensor::allocate(DType::F32, {2, 3});
  for (int i = 0; i < 6; ++i) a.data<float>()[i] = static_cast<float>(i) * 0.5f;
  Tensor b = Tensor::allocate(DType::F8_E4M3, {5});
  for (int i = 0; i < 5; ++i) b.data<uint8_t>()[i] = static_cast<uint8_t>(0x30 + i);
  write_safetensors(dir.file("x.safetensors"), {{"zeta", a}, {"alpha", b}}, {{"format", "pt"}});
  auto file = SafetensorsFile::open(dir.file("x.safetensors"));
  Tensor za = file->tensor("zeta");
  EXPECT_EQ(za.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(za.dtype(), DType::F32);
  EXPECT_EQ(std::memcmp(za.raw(), a.raw(), a.nbytes()), 0);
  Tensor zb = file->tensor("alpha");
  EXPECT_EQ(zb.dtype(), DType::F8_E4M3);
  EXPECT_EQ(std::memcmp(zb.raw(), b.raw(), b.nbytes()), 0);
  file.reset();  // the view keeps the mapping alive
  EXPECT_EQ(za.data<float>()[5], 2.5f);
}

TEST(Safetensors, TruncatedFileNamesFileAndTensor) {
  TempDir dir("st-trunc");
  Tensor a = Tensor::allocate(DType::BF16, {64, 64});
  write_safetensors(dir.file("t.safetensors"), {{"layer.weight", a}});
  std::filesystem::resize_file(dir.file("t.safetensors"), std::filesystem::file_size(dir.file("t.safetensors")) - 100);
  const std::string message = error_of([&] { SafetensorsFile::open(dir.file("t.safetensors")); });
  EXPECT_NE(message.find("t.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("layer.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("out of range"), std::string::npos) << message;
}

TEST(Safetensors, HeaderProblemsAreReported) {
  TempDir dir("st-header");
  struct Case { std::string header; size_t data; const char* expected; };
  const Case cases[] = {
      {"{not json", 0, "header is not a valid JSON object"},
      {R"({"w": {"dtype": "F8_E5M2", "shape": [1], "data_offsets": [0, 1]}})", 1, "tensor 'w': unsupported dtype F8_E5M2"},
      {R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8, "tensor 'w': data_offsets [0, 16) out of range"},
      {R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8, "tensor 'w': 8 bytes for shape [3] of F32 (expected 12)"},
      {R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4, "tensor 'w': bad shape"},
      {R"({"w": {"dtype": "F32", "shape": [1]}})", 4, "tensor 'w': bad data_offsets"},
      {R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4, "tensor 'w': missing dtype"},
  };
  for (const Case& c : cases) {
    write_raw(dir.file("h.safetensors"), c.header, c.data);
    const std::string message = error_of([&] { SafetensorsFile::open(dir.file("h.safetensors")); });
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.header << " -> " << message;
    EXPECT_NE(message.find("h.safetensors"), std::string::npos) << message;
  }
  {
    std::ofstream(dir.file("short.safetensors")) << "abc";
    EXPECT_NE(error_of([&] { SafetensorsFile::open(dir.file("short.safetensors")); }).find("truncated file"), std::string::npos);
  }
  {
    std::ofstream out(dir.file("long.safetensors"), std::ios::binary);
    uint64_t length = 1 << 20;
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << "{}";
  }
  EXPECT_NE(error_of([&] { SafetensorsFile::open(dir.file("long.safetensors")); }).find("exceeds the file"), std::string::npos);
  EXPECT_NE(error_of([&] { SafetensorsFile::open(dir.file("missing.safetensors")); }).find("cannot open"), std::string::npos);
}

TEST(Checkpoint, ShardedIndexIsFollowedAndChecked) {
  TempDir dir("st-shards");
  std::map<std::string, Tensor> tensors;
  for (int i = 0; i < 5; ++i) tensors["t" + std::to_string(i)] = Tensor::allocate(DType::F32, {i + 1});
  fathom::testing::write_checkpoint(dir.path(), tensors, 3);
  Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_EQ(checkpoint.names().size(), 5u);
  EXPECT_EQ(checkpoint.tensor("t4").dim(0), 5);
  EXPECT_NE(checkpoint.file_of("t1").find("model-00002-of-00003.safetensors"), std::string::npos);

  std::filesystem::remove(dir.file("model-00003-of-00003.safetensors"));
  const std::string message = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_NE(message.find("lists shard model-00003-of-00003.safetensors which does not exist"), std::string::npos) << message;

  std::ofstream(dir.file("model.safetensors.index.json")) << "[1,2";
  EXPECT_NE(error_of([&] { Checkpoint::open(dir.path()); }).find("model.safetensors.index.json: not valid JSON"), std::string::npos);
}

TEST(Checkpoint, EmptyDirectoryIsAnError) {
  TempDir dir("st-empty");
  EXPECT_NE(error_of([&] { Checkpoint::open(dir.path()); }).find("no *.safetensors files"), std::string::npos);
}

}  // namespace
}  // namespace fathom::model
