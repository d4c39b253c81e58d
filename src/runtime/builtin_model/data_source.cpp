// Training tokens: learnable synthetic sequences from a seeded permutation, or a text file's bytes at random offsets.
#include "builtin_model/data_source.h"

#include <fstream>
#include <iterator>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

namespace {

constexpr double kNoise = 0.1;

at::Generator generator_for(uint64_t seed, int step, int index) {
  return at::detail::createCPUGenerator(seed * 7777777ULL + static_cast<uint64_t>(step) * 1000003ULL +
                                        static_cast<uint64_t>(index) * 7919ULL + 17);
}

}  // namespace

DataSource DataSource::synthetic(int vocab, uint64_t seed) {
  if (vocab < 2) throw Error(fmt::format("synthetic data needs a vocabulary of at least 2 tokens (got {})", vocab));
  DataSource source;
  source.vocab_ = vocab;
  source.seed_ = seed;
  source.description_ = fmt::format("synthetic successor sequences over {} tokens", vocab);
  return source;
}

DataSource DataSource::text_file(const std::string& path, uint64_t seed) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the data file", path));
  auto bytes =
      std::make_shared<std::vector<uint8_t>>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(fmt::format("{}: read error", path));
  DataSource source;
  source.vocab_ = 256;
  source.seed_ = seed;
  source.description_ = fmt::format("{} ({} bytes, byte-level tokens)", path, bytes->size());
  source.text_ = std::move(bytes);
  return source;
}

MicroBatchData DataSource::microbatch(int step, int index, int batch, int seq_len) const {
  at::Generator gen = generator_for(seed_, step, index);
  const auto longs = at::TensorOptions().dtype(at::kLong);
  at::Tensor sequences;
  if (text_) {
    const int64_t span = seq_len + 1;
    if (static_cast<int64_t>(text_->size()) < span)
      throw Error(fmt::format("{}: shorter than one sequence of {} tokens", description_, span));
    const at::Tensor starts = at::randint(static_cast<int64_t>(text_->size()) - span + 1, {batch}, gen, longs);
    sequences = at::empty({batch, span}, longs);
    auto out = sequences.accessor<int64_t, 2>();
    for (int r = 0; r < batch; ++r) {
      const int64_t start = starts[r].item<int64_t>();
      for (int64_t i = 0; i < span; ++i) out[r][i] = (*text_)[start + i];
    }
  } else {
    // The successor of every token is fixed by a permutation drawn from the seed alone.
    at::Generator fixed = generator_for(seed_, -1, -1);
    const at::Tensor successor = at::randperm(vocab_, fixed, longs);
    sequences = at::empty({batch, seq_len + 1}, longs);
    sequences.select(1, 0).copy_(at::randint(vocab_, {batch}, gen, longs));
    for (int i = 0; i < seq_len; ++i)
      sequences.select(1, i + 1).copy_(successor.index_select(0, sequences.select(1, i)));
    const at::Tensor noise = at::randint(vocab_, sequences.sizes(), gen, longs);
    const at::Tensor replace = at::rand(sequences.sizes(), gen, at::TensorOptions().dtype(at::kDouble)) < kNoise;
    sequences = at::where(replace, noise, sequences);
  }
  return {sequences.narrow(1, 0, seq_len).contiguous(), sequences.narrow(1, 1, seq_len).contiguous(), {}};
}

std::vector<MicroBatchData> DataSource::batch(int step, int first, int count, int batch_size, int seq_len) const {
  std::vector<MicroBatchData> result;
  for (int i = first; i < first + count; ++i) result.push_back(microbatch(step, i, batch_size, seq_len));
  return result;
}

}  // namespace flexpipe::runtime
