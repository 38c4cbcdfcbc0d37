// Writes the seed corpus of each fuzz target: small valid inputs (and a few near misses) from
// which libFuzzer's mutations start, so they reach past the first header check quickly.
//
//   make_fuzz_seeds OUT_DIR CONFIGS_DIR
//
// creates OUT_DIR/seeds/<target>/ (rewritten each time) and OUT_DIR/corpus/<target>/ (kept:
// what earlier runs found interesting).
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "apps/checkpoint.h"
#include "dist/dlcp/packet.h"
#include "tiny_run.h"

namespace fs = std::filesystem;

namespace {

using Bytes = std::string;

void put(const fs::path& dir, const std::string& name, const Bytes& bytes) {
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

Bytes slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Bytes be32(uint32_t v) {
  return {char(v >> 24), char((v >> 16) & 0xFF), char((v >> 8) & 0xFF), char(v & 0xFF)};
}

Bytes gzip(const Bytes& plain, const fs::path& scratch) {
  gzFile f = gzopen(scratch.c_str(), "wb");
  gzwrite(f, plain.data(), static_cast<unsigned>(plain.size()));
  gzclose(f);
  Bytes out = slurp(scratch);
  fs::remove(scratch);
  return out;
}

fs::path fresh(const fs::path& out, const std::string& target) {
  fs::remove_all(out / "seeds" / target);
  fs::create_directories(out / "seeds" / target);
  fs::create_directories(out / "corpus" / target);
  return out / "seeds" / target;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_fuzz_seeds OUT_DIR CONFIGS_DIR\n");
    return 2;
  }
  const fs::path out = argv[1], configs = argv[2];

  // Config: every shipped config, and one with overrides after the "\n\x01" separator.
  fs::path dir = fresh(out, "fuzz_config");
  for (const auto& e : fs::directory_iterator(configs)) {
    if (e.path().extension() == ".prototxt") put(dir, e.path().filename().string(), slurp(e.path()));
  }
  put(dir, "overrides", slurp(configs / "mlp_synthetic.prototxt") +
                            "\n\x01optimizer.lr=0.1\nlr_schedule.milestones=[2,3]\nmodel.hidden=[8]\n"
                            "data { batch_size: 4 }\nepochs=-1\n");

  // IDX: 2 images of 3x2 and their labels; mode byte first (0 images, 1 labels, 2 both).
  dir = fresh(out, "fuzz_idx");
  const Bytes images = be32(0x803) + be32(2) + be32(3) + be32(2) + Bytes(12, '\x7f');
  const Bytes labels = be32(0x801) + be32(2) + Bytes{'\x01', '\x09'};
  put(dir, "images", "\x00" + images);
  put(dir, "labels", Bytes("\x01") + labels);
  put(dir, "images_gz", "\x00" + gzip(images, out / "scratch.gz"));
  const uint16_t split = static_cast<uint16_t>(images.size());
  put(dir, "pair", Bytes("\x02") + char(split >> 8) + char(split & 0xFF) + images + labels);
  put(dir, "pair_gz", Bytes("\x02") + char(0) + char(gzip(images, out / "scratch.gz").size()) +
                          gzip(images, out / "scratch.gz") + gzip(labels, out / "scratch.gz"));

  // CIFAR-10: two records (label, 3072 pixel bytes), and a truncated one.
  dir = fresh(out, "fuzz_cifar");
  Bytes records;
  for (char label : {'\x03', '\x07'}) records += label + Bytes(3072, label);
  put(dir, "two_records", records);
  put(dir, "truncated", records.substr(0, 3000));

  // Checkpoint: one the fuzzer's TinyRun accepts, with (0x01) and without (0x00) the repair of
  // size and checksum the harness does after mutating.
  dir = fresh(out, "fuzz_checkpoint");
  {
    mt::fuzz::TinyRun run;
    mt::apps::TrainingState state;
    state.epoch = 1;
    state.next_batch = 2;
    state.global_iteration = 7;
    state.best_accuracy = 42.5;
    state.config_text = "name: \"tiny\"\n";
    const fs::path tmp = out / "seed.ckpt";
    mt::apps::save_checkpoint(tmp.string(), *run.model, *run.optimizer, run.sync, state);
    const Bytes ckpt = slurp(tmp);
    fs::remove(tmp);
    put(dir, "repaired", "\x01" + ckpt);
    put(dir, "as_is", Bytes(1, '\x00') + ckpt);
  }

  // Tokenizer: mode byte (bit 0 lowercase, bit 1 also read the input as a vocab.txt).
  dir = fresh(out, "fuzz_tokenizer");
  put(dir, "ascii", "\x01The players are playing, a cafe!");
  put(dir, "utf8", "\x00" "Caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 na\xc3\xafve \xe2\x80\x94 \xcc\x81x");
  put(dir, "invalid_utf8", "\x01\xff\xfe\xc3 \xe4\xb8 abc\x80");
  put(dir, "vocab", "\x03[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\nplay\n");

  // DLCP packets: mode byte (bit 0: repair the checksum after mutation), then a datagram. The
  // data packet is packet 2 of a 1000-element transfer in packets of 16, as the harness expects.
  dir = fresh(out, "fuzz_dlcp_packet");
  {
    namespace dlcp = mt::dist::dlcp;
    dlcp::PacketHeader h;
    h.job = 7, h.sender = 1, h.iteration = 3, h.transfer = 5, h.index = 2, h.offset = 32, h.total = 63;
    h.contributors = 2, h.priority = 3, h.layer = 4;
    const std::vector<float> values(16, 0.5f);
    const auto data = dlcp::encode_data(h, values.data(), 16);
    const auto ack = dlcp::encode_ack(h, std::vector<bool>{true, false, true, true, false, true, false, false, true});
    put(dir, "data", "\x01" + Bytes(data.begin(), data.end()));
    put(dir, "data_as_is", Bytes(1, '\x00') + Bytes(data.begin(), data.end()));
    put(dir, "ack", "\x01" + Bytes(ack.begin(), ack.end()));
    put(dir, "truncated", "\x00" + Bytes(data.begin(), data.begin() + 30));
  }
  return 0;
}
