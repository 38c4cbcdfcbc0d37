// Archives (core/serialize.h): round trips, and that damaged or half-written files give a clear
// Error (never a crash) and that a failed save leaves the previous file intact.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/serialize.h"

using namespace mt::core;
namespace fs = std::filesystem;

namespace {

// A fresh folder per test under the system temp dir.
fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("mt_test_serialize_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

Archive sample_archive() {
  Archive a;
  a.meta["epoch"] = "3";
  a.meta["config"] = "name: \"x\"\nbinary\0ok";
  a.meta["empty"] = "";
  a.add("model.", {{"w", Tensor::from_vector(std::vector<float>{1.5f, -2.f, 3.25f, 0.f, 1e-8f, 7.f}, {2, 3})},
                   {"steps", Tensor::from_vector(std::vector<int64_t>{1, -2, 1LL << 40}, {3})}});
  a.add("optim.", {{"scalar", Tensor::scalar(4.0f)}, {"empty", Tensor::zeros({0, 5})}});
  return a;
}

}  // namespace

TEST(Serialize, RoundTrip) {
  const fs::path dir = temp_dir("roundtrip");
  const std::string path = (dir / "a.ckpt").string();
  const Archive a = sample_archive();
  save_archive(path, a);
  const Archive b = load_archive(path);

  EXPECT_EQ(b.meta, a.meta);
  ASSERT_EQ(b.tensors.size(), a.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(b.tensors[i].first, a.tensors[i].first);
    EXPECT_EQ(b.tensors[i].second.shape(), a.tensors[i].second.shape());
    EXPECT_EQ(b.tensors[i].second.dtype(), a.tensors[i].second.dtype());
  }
  EXPECT_EQ(b.find("model.w")->to_vector(), a.find("model.w")->to_vector());
  const Tensor* steps = b.find("model.steps");
  ASSERT_NE(steps, nullptr);
  EXPECT_EQ(steps->data<int64_t>()[2], 1LL << 40);
  EXPECT_EQ(b.find("missing"), nullptr);

  StateDict model = b.with_prefix("model.");
  ASSERT_EQ(model.size(), 2u);
  EXPECT_EQ(model[0].first, "w");
  EXPECT_EQ(model[1].first, "steps");
  // No temporary files are left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(Serialize, NonContiguousTensorsAreSavedInLogicalOrder) {
  const fs::path dir = temp_dir("noncontig");
  const std::string path = (dir / "t.ckpt").string();
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);
  Archive a;
  a.tensors.emplace_back("t", t);
  save_archive(path, a);
  const Archive b = load_archive(path);
  EXPECT_EQ(b.find("t")->shape(), (Shape{3, 2}));
  EXPECT_EQ(b.find("t")->to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  fs::remove_all(dir);
}

TEST(Serialize, TruncatedFilesAreErrors) {
  const fs::path dir = temp_dir("truncated");
  const fs::path good = dir / "good.ckpt";
  save_archive(good.string(), sample_archive());
  const std::string bytes = read_bytes(good);
  const fs::path cut = dir / "cut.ckpt";
  for (size_t n = 0; n < bytes.size(); n += (n < 64 ? 1 : 7)) {
    write_bytes(cut, bytes.substr(0, n));
    try {
      load_archive(cut.string());
      ADD_FAILURE() << "a file cut to " << n << " of " << bytes.size() << " bytes loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(cut.string()), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

TEST(Serialize, FlippedByteIsAChecksumError) {
  const fs::path dir = temp_dir("flipped");
  const fs::path path = dir / "a.ckpt";
  save_archive(path.string(), sample_archive());
  std::string bytes = read_bytes(path);
  // Every byte after the header: a flip in the body or the CRC itself must be caught.
  for (size_t i = 20; i < bytes.size(); i += 5) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    write_bytes(path, bad);
    try {
      load_archive(path.string());
      ADD_FAILURE() << "flipping byte " << i << " went unnoticed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

TEST(Serialize, BadMagicAndMissingFile) {
  const fs::path dir = temp_dir("magic");
  write_bytes(dir / "x.ckpt", "this is not an archive at all, just some text");
  try {
    load_archive((dir / "x.ckpt").string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a mintrain archive"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_archive((dir / "missing.ckpt").string()), Error);
  fs::remove_all(dir);
}

TEST(Serialize, WriteFailingMidwayKeepsTheOldFile) {
  const fs::path dir = temp_dir("midway");
  const fs::path path = dir / "a.ckpt";
  save_archive(path.string(), sample_archive());
  const std::string before = read_bytes(path);

  // A file-size limit makes write() fail part-way (EFBIG), as a full disk would.
  Archive big;
  big.tensors.emplace_back("big", Tensor::zeros({1 << 16}));
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  EXPECT_THROW(save_archive(path.string(), big), Error);
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(load_archive(path.string()).meta.at("epoch"), "3");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1)
      << "the temporary file was left behind";
  fs::remove_all(dir);
}

TEST(Serialize, FailedWriteKeepsTheOldFile) {
  const fs::path dir = temp_dir("atomic");
  const fs::path path = dir / "a.ckpt";
  save_archive(path.string(), sample_archive());
  const std::string before = read_bytes(path);
  Archive other;
  other.meta["epoch"] = "4";

  // A read-only folder: the temporary file cannot be created, so the save fails and the good
  // file is untouched. (Root ignores folder permissions; the test above covers it.)
  if (::geteuid() != 0) {
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(save_archive(path.string(), other), Error);
    fs::permissions(dir, fs::perms::owner_all);
    EXPECT_EQ(read_bytes(path), before);
    EXPECT_EQ(load_archive(path.string()).meta.at("epoch"), "3");
  }
  // Writing into a folder that does not exist names the file.
  try {
    save_archive((dir / "no/such/dir/a.ckpt").string(), other);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir/a.ckpt"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}
